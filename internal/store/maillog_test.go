package store

import (
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestMailLog: every state of a rollout's mails is in its log, which
// outlives settling and goes with retention or collection.
func TestMailLog(t *testing.T) {
	d := openT(t, t.TempDir())
	k := rollout.Key{Cluster: "prod", Hash: "abababababababababababababababababababab"}
	other := rollout.Key{Cluster: "prod", Hash: "abababababababababababababababababababab00"} // a longer hash with k's as prefix
	mail := func(k rollout.Key, kind rollout.MailKind, to string) rollout.Mail {
		return rollout.Mail{Key: rollout.MailKey{Rollout: k, Kind: kind, To: to}.String(), Kind: kind, To: to}
	}
	silence := rollout.Mail{Key: rollout.MailKey{Kind: rollout.MailBlind, Episode: walT0, To: "ops@x"}.String(), Kind: rollout.MailBlind, To: "ops@x"}
	failed := mail(k, rollout.MailFailed, "a@x")
	failed.Layer, failed.Release, failed.Reason = "flux-system/apps", rollout.Ref{Kind: "HelmRelease", Namespace: "apps", Name: "web"}, "UpgradeFailed"
	failed.Key = rollout.MailKey{Rollout: k, Kind: rollout.MailFailed, About: []string{failed.Layer, failed.Release.String(), failed.Reason}, To: "a@x"}.String()
	b := &rollout.Batch{Mails: []rollout.Mail{mail(k, rollout.MailApplying, "a@x"), mail(k, rollout.MailApplied, "a@x"),
		mail(k, rollout.MailStuck, "b@x"), mail(other, rollout.MailApplying, "a@x"), silence, failed}, At: walT0}
	if err := d.Commit(b); err != nil {
		t.Fatal(err)
	}
	qs, err := d.Pending()
	if err != nil || len(qs) != 6 {
		t.Fatalf("%d mails pending (%v)", len(qs), err)
	}
	sentAt := walT0.Add(time.Minute)
	if err := d.Sent(qs[0].Seq, sentAt); err != nil {
		t.Fatal(err)
	}
	qs[1].Retry(walT0.Add(2*time.Minute), "421 try later")
	if err := d.Record(qs[1]); err != nil {
		t.Fatal(err)
	}
	qs[2].Attempts = 2
	qs[2].DeadLetter("550 no such user")
	if err := d.Record(qs[2]); err != nil {
		t.Fatal(err)
	}
	log, err := d.MailLog(k)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, r := range log {
		got += string(r.Kind) + " " + r.Release.String() + " " + r.To + " " + string(r.State) + " " + r.LastError + ";"
	}
	if want := "applying  a@x sent ;applied  a@x retrying 421 try later;stuck  b@x dead 550 no such user;failed HelmRelease/apps/web a@x waiting ;"; got != want {
		t.Fatalf("mail log %q, want %q", got, want)
	}
	if log[0].Sent == nil || !log[0].Sent.Equal(sentAt) || !log[1].NextAttempt.Equal(qs[1].NextAttempt) {
		t.Fatalf("times: %+v", log)
	}
	// Settled: the log stays. Collected: it goes.
	view := &rollout.View{Cluster: k.Cluster, Hash: k.Hash, Verdict: rollout.VerdictApplied, Terminal: true, FirstSeen: walT0, LastSeen: walT0}
	if err := d.Commit(&rollout.Batch{Forget: []rollout.Key{k, other}, Settle: []*rollout.View{view}, At: walT0}); err != nil {
		t.Fatal(err)
	}
	if log, _ := d.MailLog(k); len(log) != 4 {
		t.Fatalf("after settling: %d mails logged, want 4", len(log))
	}
	if log, _ := d.MailLog(other); len(log) != 0 {
		t.Fatalf("after collection: %d mails logged, want none", len(log))
	}
	// Retention purges the settled rollout and its log.
	if err := d.Commit(&rollout.Batch{PurgeBefore: walT0.Add(time.Hour), At: walT0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if log, _ := d.MailLog(k); len(log) != 0 {
		t.Fatalf("after retention: %d mails logged, want none", len(log))
	}
}
