package store

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// TestCopyIntoPostgres: every record of a bbolt state (live evidence and
// its pending log, settled rollouts and their indexes, floors, the outbox
// with its sequence and keys, dead letters, the mail log, the channels'
// outboxes, whatever their names, and the forge's heads) is copied into PostgreSQL, and Compare finds them
// equal; a record changed on one side, or a second copy, is refused.
func TestCopyIntoPostgres(t *testing.T) {
	src := openT(t, t.TempDir())
	if err := src.SetChannels(outbox.ForgeChannel(), outbox.Channel{Name: "discord"}); err != nil {
		t.Fatal(err)
	}
	b := sampleBatch()
	k := rollout.Key{Cluster: "prod", Hash: strings.Repeat("ab", 20)}
	b.Mails = []rollout.Mail{mailFor(k, rollout.MailApplying, "a@x"), mailFor(k, rollout.MailApplied, "a@x"), mailFor(k, rollout.MailStuck, "b@x")}
	b.Published = []rollout.Published{{Key: k, Verdict: rollout.VerdictApplying, At: at}}
	if err := src.Commit(b); err != nil {
		t.Fatal(err)
	}
	qs, _ := src.Pending()
	if err := src.Sent(qs[0].Seq, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	qs[1].DeadLetter("550 no such user")
	if err := src.Record(qs[1]); err != nil {
		t.Fatal(err)
	}
	if err := src.SetHead("prod", "GitRepository/flux-system/app", strings.Repeat("c", 40)); err != nil {
		t.Fatal(err)
	}
	// Evidence acknowledged through the log alone, not checkpointed yet.
	if err := src.Commit(evidenceBatch(strings.Repeat("5", 40))); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Start(t).NewDatabase(t)
	dst := openReplica(t, conn, PostgresOptions{})
	// What Copy reads is what bbolt has once its log is checkpointed, as
	// opening the data directory does.
	src.Close()
	src = openT(t, filepath.Dir(src.file()))
	counts, err := Copy(dst.DB, src)
	if err != nil {
		t.Fatal(err)
	}
	if counts[string(bucketEvidence)] != len(b.Puts)*2 || counts[string(bucketSettled)] != 1 || counts[string(bucketOutbox)] != 1 || counts[string(bucketDead)] != 1 ||
		counts["forge"] != 1 || counts["discord"] != 1 || counts["discord-due"] != 1 {
		t.Fatalf("counts %v", counts)
	}
	if err := Compare(dst.DB, src); err != nil {
		t.Fatal(err)
	}
	if ps, err := dst.Channel("discord").Publications(); err != nil || len(ps) != 1 {
		t.Fatalf("the copy's discord outbox: %+v (%v)", ps, err)
	}
	if l := loadAll(t, dst.DB); len(l.evidence) != len(b.Puts)*2 || len(l.mailed) != 3 {
		t.Fatalf("loaded from the copy: %d evidence, %d mail keys", len(l.evidence), len(l.mailed))
	}
	// The copy's outbox goes on from the same sequence.
	if err := dst.Enqueue([]rollout.Mail{mailFor(k, rollout.MailFailed, "a@x")}, at); err != nil {
		t.Fatal(err)
	}
	pending, _ := dst.Pending()
	if len(pending) != 2 || pending[1].Seq != qs[2].Seq+1 {
		t.Fatalf("pending after the copy: %+v", pending)
	}
	if err := Compare(dst.DB, src); err == nil || !strings.Contains(err.Error(), "outbox") {
		t.Fatalf("a mail more in the copy: %v", err)
	}
	if _, err := Copy(dst.DB, src); err == nil || !strings.Contains(err.Error(), "already holds") {
		t.Fatalf("a second copy: %v", err)
	}
	if running, err := dst.LeaderRunning(context.Background()); err != nil || running {
		t.Fatalf("leader running: %v %v", running, err)
	}
}
