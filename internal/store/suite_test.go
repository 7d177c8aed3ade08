package store

import (
	"context"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// The store suite, which every backend passes (in the style of Dex's
// storage/conformance): a table of cases, each on a fresh, empty store of
// each backend. A case opens its store with open, as many times as it
// likes, closing the handle before it opens another (bbolt's file takes
// one process).

type Opener func(t *testing.T) *DB

var suite = []struct {
	name string
	run  func(t *testing.T, open Opener)
}{
	{"EvidenceSurvivesReopen", testEvidenceSurvivesReopen},
	{"MailOncePerKey", testMailOncePerKey},
	{"MailLog", testMailLog},
	{"DeadLetters", testDeadLetters},
	{"SettledArchive", testSettledArchive},
	{"ScanSettledInChunks", testScanSettledInChunks},
	{"ForgeOutbox", testForgeOutbox},
	{"ChannelOutboxes", testChannelOutboxes},
	{"NewChannel", testNewChannel},
	{"Size", testSize},
	{"ProgressInMemory", testProgressInMemory},
	{"ForgeHeadsAndLastEvent", testForgeHeadsAndLastEvent},
	{"FailedCommitWritesNothing", testFailedCommitWritesNothing},
}

// Backend is one kind of store: Start readies it for a test
// (PostgreSQL: a server) and returns fresh, which makes a new, empty store
// for one of its subtests and returns its Opener.
type Backend struct {
	Name  string
	Start func(t *testing.T) (fresh func(t *testing.T) Opener)
}

var Backends = []Backend{
	{"bbolt", func(*testing.T) func(t *testing.T) Opener {
		return func(t *testing.T) Opener {
			dir := t.TempDir()
			return func(t *testing.T) *DB { return openT(t, dir) }
		}
	}},
	{"postgres", func(t *testing.T) func(t *testing.T) Opener {
		srv := pgtest.Start(t) // one server, a database for each subtest
		return func(t *testing.T) Opener {
			conn := srv.NewDatabase(t)
			return func(t *testing.T) *DB { return openPG(t, conn) }
		}
	}},
}

// openPG opens the store of database conn; the test's cleanup closes it.
func openPG(t *testing.T, conn string) *DB {
	t.Helper()
	d, _, err := OpenPostgres(context.Background(), conn, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestSuite(t *testing.T) {
	for _, b := range Backends {
		t.Run(b.Name, func(t *testing.T) {
			fresh := b.Start(t)
			for _, c := range suite {
				t.Run(c.name, func(t *testing.T) { c.run(t, fresh(t)) })
			}
		})
	}
}

// settledView is settled rollout i, begun at at.
func settledView(i int, at time.Time) *rollout.View {
	hash := fmt.Sprintf("%040x", i)
	return &rollout.View{
		Cluster: "default", Hash: hash, Revision: "main@sha1:" + hash, Verdict: rollout.VerdictApplied, Terminal: true,
		FirstSeen: at, LastSeen: at.Add(30 * time.Second), Summary: strings.Repeat("x", 4096),
		Layers: rollout.Layers{}, Failures: []rollout.FailureView{},
	}
}

// keysIn counts the keys of a bucket.
func keysIn(t *testing.T, d *DB, name []byte) int {
	t.Helper()
	n := 0
	err := d.kv.view(func(tx txn) error {
		return tx.Bucket(name).ForEach(func(_, _ []byte) error { n++; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

type stored struct {
	evidence map[rollout.EvidenceKey]*rollout.Evidence
	mailed   []string
	floors   map[rollout.FloorKey]rollout.Floor
}

func loadAll(t *testing.T, d *DB) stored {
	t.Helper()
	l := stored{evidence: map[rollout.EvidenceKey]*rollout.Evidence{}, floors: map[rollout.FloorKey]rollout.Floor{}}
	err := d.Load(func(k rollout.EvidenceKey, ev *rollout.Evidence) error { l.evidence[k] = ev; return nil },
		func(k string) { l.mailed = append(l.mailed, k) },
		func(k rollout.FloorKey, f rollout.Floor) error { l.floors[k] = f; return nil })
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(l.mailed)
	return l
}

// testEvidenceSurvivesReopen: what a commit stored is stored back, after a
// reopen too, with deletions applied; and the sample batch's every record.
func testEvidenceSurvivesReopen(t *testing.T, open Opener) {
	d := open(t)
	b := sampleBatch()
	if err := d.Commit(b); err != nil {
		t.Fatal(err)
	}
	var gone rollout.EvidenceKey
	for k := range b.Puts {
		gone = k
		break
	}
	if err := d.Commit(&rollout.Batch{Deletes: []rollout.EvidenceKey{gone}, At: at}); err != nil {
		t.Fatal(err)
	}
	check := func(d *DB) {
		t.Helper()
		l := loadAll(t, d)
		if len(l.evidence) != len(b.Puts)-1 {
			t.Fatalf("%d evidence records stored, want %d", len(l.evidence), len(b.Puts)-1)
		}
		for k, ev := range b.Puts {
			got, ok := l.evidence[k]
			if k == gone {
				if ok {
					t.Fatalf("deleted evidence %v stored", k)
				}
				continue
			}
			if !ok || string(encodeEvidence(k.Emitter.Role, got)) != string(encodeEvidence(k.Emitter.Role, ev)) {
				t.Fatalf("evidence %v stored as %+v, want %+v", k, got, ev)
			}
		}
		if len(l.floors) != len(b.Floors) {
			t.Fatalf("%d floors stored, want %d", len(l.floors), len(b.Floors))
		}
		for k, f := range b.Floors {
			if g := l.floors[k]; g.Hash != f.Hash || !g.First.Equal(f.First) {
				t.Fatalf("floor %v stored as %+v, want %+v", k, g, f)
			}
		}
		if v, err := d.Settled(b.Settle[0].Key()); err != nil || v == nil || v.Summary != b.Settle[0].Summary {
			t.Fatalf("settled view %+v (%v)", v, err)
		}
	}
	check(d)
	d.Close()
	check(open(t))
}

func mailFor(k rollout.Key, kind rollout.MailKind, to string) rollout.Mail {
	return rollout.Mail{Key: rollout.MailKey{Rollout: k, Kind: kind, To: to}.String(), Kind: kind, To: to}
}

// testMailOncePerKey: a mail's key is enqueued once, across commits,
// deliveries and reopens, until its rollout is forgotten; sequences grow
// across reopens.
func testMailOncePerKey(t *testing.T, open Opener) {
	d := open(t)
	k := rollout.Key{Cluster: "prod", Hash: strings.Repeat("ab", 20)}
	m := mailFor(k, rollout.MailApplying, "a@x")
	for range 2 {
		if err := d.Commit(&rollout.Batch{Mails: []rollout.Mail{m, m}, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	qs, err := d.Pending()
	if err != nil || len(qs) != 1 || qs[0].Mail.Key != m.Key || !qs[0].NextAttempt.Equal(at) {
		t.Fatalf("pending %+v (%v), want the mail once, due at once", qs, err)
	}
	if err := d.Sent(qs[0].Seq, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = open(t)
	if l := loadAll(t, d); !slices.Equal(l.mailed, []string{m.Key}) {
		t.Fatalf("keys stored %q, want the mail's", l.mailed)
	}
	if err := d.Enqueue([]rollout.Mail{m}, at); err != nil {
		t.Fatal(err)
	}
	if qs, _ := d.Pending(); len(qs) != 0 {
		t.Fatalf("a sent mail enqueued again: %+v", qs)
	}
	m2 := mailFor(k, rollout.MailApplied, "a@x")
	if err := d.Enqueue([]rollout.Mail{m2}, at); err != nil {
		t.Fatal(err)
	}
	qs, _ = d.Pending()
	if len(qs) != 1 || qs[0].Seq <= 1 {
		t.Fatalf("pending %+v, want the second mail with a later sequence", qs)
	}
	// Forgotten (collected), its keys go.
	if err := d.Commit(&rollout.Batch{Forget: []rollout.Key{k}, At: at}); err != nil {
		t.Fatal(err)
	}
	if l := loadAll(t, d); len(l.mailed) != 0 {
		t.Fatalf("keys of a forgotten rollout: %q", l.mailed)
	}
}

// testMailLog: every state of a rollout's mails is in its log, which
// outlives settling and goes with retention or collection.
func testMailLog(t *testing.T, open Opener) {
	d := open(t)
	k := rollout.Key{Cluster: "prod", Hash: "abababababababababababababababababababab"}
	other := rollout.Key{Cluster: "prod", Hash: "abababababababababababababababababababab00"} // a longer hash with k's as prefix
	silence := rollout.Mail{Key: rollout.MailKey{Kind: rollout.MailBlind, Episode: at, To: "ops@x"}.String(), Kind: rollout.MailBlind, To: "ops@x"}
	failed := mailFor(k, rollout.MailFailed, "a@x")
	failed.Layer, failed.Release, failed.Reason = "flux-system/apps", rollout.Ref{Kind: "HelmRelease", Namespace: "apps", Name: "web"}, "UpgradeFailed"
	failed.Key = rollout.MailKey{Rollout: k, Kind: rollout.MailFailed, About: []string{failed.Layer, failed.Release.String(), failed.Reason}, To: "a@x"}.String()
	b := &rollout.Batch{Mails: []rollout.Mail{mailFor(k, rollout.MailApplying, "a@x"), mailFor(k, rollout.MailApplied, "a@x"),
		mailFor(k, rollout.MailStuck, "b@x"), mailFor(other, rollout.MailApplying, "a@x"), silence, failed}, At: at}
	if err := d.Commit(b); err != nil {
		t.Fatal(err)
	}
	qs, err := d.Pending()
	if err != nil || len(qs) != 6 {
		t.Fatalf("%d mails pending (%v)", len(qs), err)
	}
	sentAt := at.Add(time.Minute)
	if err := d.Sent(qs[0].Seq, sentAt); err != nil {
		t.Fatal(err)
	}
	qs[1].Retry(at.Add(2*time.Minute), "421 try later")
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
	view := &rollout.View{Cluster: k.Cluster, Hash: k.Hash, Verdict: rollout.VerdictApplied, Terminal: true, FirstSeen: at, LastSeen: at}
	if err := d.Commit(&rollout.Batch{Forget: []rollout.Key{k, other}, Settle: []*rollout.View{view}, At: at}); err != nil {
		t.Fatal(err)
	}
	if log, _ := d.MailLog(k); len(log) != 4 {
		t.Fatalf("after settling: %d mails logged, want 4", len(log))
	}
	if log, _ := d.MailLog(other); len(log) != 0 {
		t.Fatalf("after collection: %d mails logged, want none", len(log))
	}
	// Retention purges the settled rollout and its log.
	if err := d.Commit(&rollout.Batch{PurgeBefore: at.Add(time.Hour), At: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if log, _ := d.MailLog(k); len(log) != 0 {
		t.Fatalf("after retention: %d mails logged, want none", len(log))
	}
}

// testDeadLetters: a mail recorded dead leaves the outbox for the dead
// letters with its last error, and stays there after a reopen.
func testDeadLetters(t *testing.T, open Opener) {
	d := open(t)
	k := rollout.Key{Cluster: "prod", Hash: strings.Repeat("cd", 20)}
	if err := d.Enqueue([]rollout.Mail{mailFor(k, rollout.MailApplying, "a@x"), mailFor(k, rollout.MailApplied, "a@x")}, at); err != nil {
		t.Fatal(err)
	}
	qs, _ := d.Pending()
	qs[0].DeadLetter("550 no such user")
	if err := d.Record(qs[0]); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = open(t)
	pending, err := d.Pending()
	if err != nil || len(pending) != 1 || pending[0].Seq != qs[1].Seq {
		t.Fatalf("pending %+v (%v), want the second mail alone", pending, err)
	}
	dead, err := d.Dead()
	if err != nil || len(dead) != 1 || dead[0].Seq != qs[0].Seq || !dead[0].Dead || dead[0].LastError != "550 no such user" {
		t.Fatalf("dead %+v (%v)", dead, err)
	}
}

// testSettledArchive: settled rollouts are found by key, by hash, by
// prefix, by origin and cluster, counted, and purged by retention with
// their indexes.
func testSettledArchive(t *testing.T, open Opener) {
	d := open(t)
	views := []*rollout.View{settledView(1, at), settledView(2, at.Add(time.Hour)), settledView(3, at.Add(2*time.Hour))}
	views[1].Cluster = "staging"
	views[1].Hash = views[0].Hash // one commit, two clusters
	views[2].OriginHash = strings.Repeat("9", 40)
	if err := d.Commit(&rollout.Batch{Settle: views, At: at}); err != nil {
		t.Fatal(err)
	}
	if n, err := d.SettledCount(); err != nil || n != 3 {
		t.Fatalf("%d settled (%v), want 3", n, err)
	}
	if cs, err := d.SettledClusters(); err != nil || !slices.Equal(cs, []string{"default", "staging"}) {
		t.Fatalf("settled clusters %v (%v), want default and staging", cs, err)
	}
	// Settling one again counts it once.
	if err := d.Commit(&rollout.Batch{Settle: views[:1], At: at}); err != nil {
		t.Fatal(err)
	}
	if n, _ := d.SettledCount(); n != 3 {
		t.Fatalf("%d settled after settling one again, want 3", n)
	}
	missing := rollout.Key{Cluster: "default", Hash: strings.Repeat("f", 40)}
	among, err := d.SettledAmong([]rollout.Key{views[0].Key(), views[1].Key(), missing})
	if err != nil || len(among) != 2 || !among[views[0].Key()] || !among[views[1].Key()] {
		t.Fatalf("among %v (%v)", among, err)
	}
	if v, err := d.Settled(missing); err != nil || v != nil {
		t.Fatalf("missing rollout: %v (%v)", v, err)
	}
	keys := func(hash string, prefix, origin bool, cluster string, limit int) []string {
		t.Helper()
		ks, err := d.SettledKeys(hash, prefix, origin, cluster, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, k := range ks {
			out = append(out, k.Cluster+"/"+k.Hash[38:])
		}
		return out
	}
	for _, c := range []struct {
		hash           string
		prefix, origin bool
		cluster        string
		limit          int
		want           []string
	}{
		{views[0].Hash, false, false, "", 10, []string{"default/01", "staging/01"}},
		{views[0].Hash, false, false, "staging", 10, []string{"staging/01"}},
		{views[0].Hash, false, false, "", 1, []string{"default/01"}},
		{views[0].Hash[:30], false, false, "", 10, nil},
		{strings.Repeat("0", 38), true, false, "", 10, []string{"default/01", "staging/01", "default/03"}},
		{strings.Repeat("9", 40), false, true, "", 10, []string{"default/03"}},
		{strings.Repeat("9", 12), true, true, "", 10, []string{"default/03"}},
		{strings.Repeat("9", 12), false, true, "", 10, nil},
	} {
		if got := keys(c.hash, c.prefix, c.origin, c.cluster, c.limit); !slices.Equal(got, c.want) {
			t.Errorf("SettledKeys(%s, prefix %v, origin %v, %q, %d) = %v, want %v", c.hash, c.prefix, c.origin, c.cluster, c.limit, got, c.want)
		}
	}
	// Retention: by last evidence (30 s after the first).
	if err := d.Commit(&rollout.Batch{PurgeBefore: at.Add(time.Hour + time.Minute), At: at}); err != nil {
		t.Fatal(err)
	}
	if n, _ := d.SettledCount(); n != 1 {
		t.Fatalf("%d settled after retention, want 1", n)
	}
	if cs, err := d.SettledClusters(); err != nil || !slices.Equal(cs, []string{"default"}) {
		t.Fatalf("settled clusters after retention %v (%v), want default", cs, err)
	}
	if got := keys(strings.Repeat("0", 38), true, false, "", 10); !slices.Equal(got, []string{"default/03"}) {
		t.Fatalf("after retention: %v", got)
	}
	if got := keys(strings.Repeat("9", 40), false, true, "", 10); !slices.Equal(got, []string{"default/03"}) {
		t.Fatalf("origin after retention: %v", got)
	}
	if n := keysIn(t, d, bucketTime); n != 1 {
		t.Fatalf("%d keys left in the time index, want 1", n)
	}
	if err := d.Commit(&rollout.Batch{PurgeBefore: at.Add(3 * time.Hour), At: at}); err != nil {
		t.Fatal(err)
	}
	if n := keysIn(t, d, bucketOrigin); n != 0 {
		t.Fatalf("%d keys left in the origin index, want none", n)
	}
}

// testScanSettledInChunks: ScanSettled goes newest first, stops when told,
// holds no transaction while fn runs, bounds the keys one looks at for a
// cluster few match, and sees what a commit between them changed (fn may
// commit: no transaction is open while it runs).
func testScanSettledInChunks(t *testing.T, open Opener) {
	db := open(t)
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	const n = 9000
	rare := map[int]bool{0: true, 4500: true, n - 1: true} // far more than 4,096 keys apart
	// A cluster on each side of the first chunk's end (SettledClusters
	// reads 4,096 keys a transaction too).
	edge := map[int]string{4095: "edge-a", 4096: "edge-b"}
	notDefault := map[int]bool{4095: true, 4096: true}
	for lo := 0; lo < n; lo += 1000 {
		var views []*rollout.View
		for i := lo; i < lo+1000; i++ {
			v := settledView(i, t0.Add(time.Duration(i)*time.Second))
			v.Summary = ""
			if rare[i] {
				v.Cluster = "rare"
			}
			if c, ok := edge[i]; ok {
				v.Cluster = c
			}
			views = append(views, v)
		}
		if err := db.Commit(&rollout.Batch{Settle: views, At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	maps.Copy(notDefault, rare)
	if cs, err := db.SettledClusters(); err != nil || !slices.Equal(cs, []string{"default", "edge-a", "edge-b", "rare"}) {
		t.Fatalf("settled clusters %v (%v), want default, edge-a, edge-b and rare", cs, err)
	}
	scan := func(cluster string, until time.Time, fn func(i int, v *rollout.View) bool) (seen []int) {
		t.Helper()
		err := db.ScanSettled(cluster, until, func(v *rollout.View) bool {
			var i int
			if _, err := fmt.Sscanf(v.Hash, "%x", &i); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, i)
			return fn(i, v)
		})
		if err != nil {
			t.Fatal(err)
		}
		return seen
	}
	all := func(int, *rollout.View) bool { return true }
	descending := func(seen []int, from, to int, skip map[int]bool) bool {
		var want []int
		for i := from; i >= to; i-- {
			if !skip[i] {
				want = append(want, i)
			}
		}
		return slices.Equal(seen, want)
	}
	if seen := scan("default", time.Time{}, all); !descending(seen, n-1, 0, notDefault) {
		t.Fatalf("default: %d rollouts, from %v", len(seen), seen[:3])
	}
	if seen := scan("", t0.Add(5000*time.Second), all); !descending(seen, 5000, 0, nil) {
		t.Fatalf("until rollout 5000: %d rollouts, from %v", len(seen), seen[:3])
	}
	if seen := scan("rare", time.Time{}, all); !slices.Equal(seen, []int{n - 1, 4500, 0}) {
		t.Fatalf("rare: %v", seen)
	}
	if seen := scan("", time.Time{}, func(int, *rollout.View) bool { return false }); len(seen) != 1 {
		t.Fatalf("fn said stop: called %d times", len(seen))
	}
	// One transaction looks at no more than scanKeys keys: the first reads
	// rare's newest alone, so purging the other two from fn hides them.
	seen := scan("rare", time.Time{}, func(i int, _ *rollout.View) bool {
		if i == n-1 {
			if err := db.Commit(&rollout.Batch{PurgeBefore: t0.Add((4500 + 31) * time.Second), At: t0}); err != nil {
				t.Fatal(err)
			}
		}
		return true
	})
	if !slices.Equal(seen, []int{n - 1}) {
		t.Fatalf("rare, purged below the first from fn: %v", seen)
	}
	// Purge the rollouts before 6000 while the scan is in its first chunk
	// (by last evidence: 30 s after the first).
	seen = scan("", time.Time{}, func(i int, _ *rollout.View) bool {
		if i == n-2 {
			if err := db.Commit(&rollout.Batch{PurgeBefore: t0.Add((6000 + 30) * time.Second), At: t0}); err != nil {
				t.Fatal(err)
			}
		}
		return true
	})
	if !descending(seen, n-1, 6000, nil) {
		t.Fatalf("purged during the scan: %d rollouts, down to %d", len(seen), seen[len(seen)-1])
	}
}

// testForgeOutbox: a verdict is recorded once; a repeat changes nothing; a
// delivered one stays delivered; a dead one is not due until a later
// verdict; a later one is due again and replaces one not taken; the
// dispatcher's scan reads the due ones alone (their index), and retention
// drops what was delivered, never what is due.
func testForgeOutbox(t *testing.T, open Opener) {
	d := open(t)
	key := func(h string) rollout.Key { return rollout.Key{Cluster: "prod", Hash: h} }
	publish := func(h string, v rollout.Verdict, at time.Time) {
		t.Helper()
		if err := d.Commit(&rollout.Batch{Published: []rollout.Published{{Key: key(h), Verdict: v, At: at}}, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	due := func() (hashes []string, indexed int) {
		t.Helper()
		ps, err := d.Channel("forge").Publications()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			hashes = append(hashes, p.Key.Hash)
		}
		return hashes, keysIn(t, d, bucketsOf(forgeChannel).due)
	}
	for i, h := range []string{"a", "b", "c"} {
		publish(h, rollout.VerdictApplying, at.Add(time.Duration(i)*time.Minute))
	}
	publish("a", rollout.VerdictApplying, at.Add(time.Hour)) // the same again: nothing new
	if p, _, _ := d.Channel("forge").Publication(key("a")); p.Seq != 1 || !p.Changed.Equal(at) {
		t.Fatalf("a repeated verdict changed the record: %+v", p)
	}
	if err := d.Channel("forge").UpdatePublication(key("a"), func(p *outbox.Publication) { p.SentSeq, p.Sent = p.Seq, p.Verdict }); err != nil {
		t.Fatal(err)
	}
	if err := d.Channel("forge").UpdatePublication(key("b"), func(p *outbox.Publication) { p.Dead = true }); err != nil {
		t.Fatal(err)
	}
	if got, n := due(); !slices.Equal(got, []string{"c"}) || n != 1 {
		t.Fatalf("due %v (%d indexed), want c alone", got, n)
	}
	// The same verdict restated (what it says changed): due again.
	if err := d.Commit(&rollout.Batch{Published: []rollout.Published{{Key: key("a"), Verdict: rollout.VerdictApplying, At: at.Add(time.Hour), Restate: true}}, At: at}); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := d.Channel("forge").Publication(key("a")); p.Seq != 2 || !p.Due() {
		t.Fatalf("a restated verdict is not due again: %+v", p)
	}
	if err := d.Channel("forge").UpdatePublication(key("a"), func(p *outbox.Publication) { p.SentSeq, p.Sent = p.Seq, p.Verdict }); err != nil {
		t.Fatal(err)
	}
	publish("b", rollout.VerdictFailed, at.Add(2*time.Hour))  // a later verdict: due again
	publish("c", rollout.VerdictApplied, at.Add(3*time.Hour)) // replaces one not taken
	if got, n := due(); !slices.Equal(got, []string{"b", "c"}) || n != 2 {
		t.Fatalf("due %v (%d indexed), want b and c", got, n)
	}
	if p, _, _ := d.Channel("forge").Publication(key("c")); p.Seq != 2 || p.Verdict != rollout.VerdictApplied || !p.Since.Equal(at.Add(2*time.Minute)) {
		t.Fatalf("c: %+v, want applied, its second verdict, waiting since the first", p)
	}
	if err := d.Commit(&rollout.Batch{PurgeBefore: at.Add(24 * time.Hour), At: at.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := d.Channel("forge").Publication(key("a")); ok {
		t.Fatal("retention kept a delivered verdict")
	}
	if got, _ := due(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("retention dropped what is due: %v", got)
	}
	if err := d.Channel("forge").UpdatePublication(key("a"), func(*outbox.Publication) {}); err != ErrNoPublication {
		t.Fatalf("updating a purged record: %v, want ErrNoPublication", err)
	}
}

// testChannelOutboxes: each channel configured keeps its own record of a
// rollout, of the publications it takes (a chat the progress and the
// restated, Teams neither nor applying, the forge not the progress; the
// same progress again is nothing new), what is shown with them across a
// reopen; one channel's delivery leaves the others due; no channel
// configured takes nothing.
func testChannelOutboxes(t *testing.T, open Opener) {
	d := open(t)
	chans := []outbox.Channel{
		{Name: "forge", Restate: true},
		{Name: "slack", Restate: true, Progress: true},
		{Name: "teams", Skip: []rollout.Verdict{rollout.VerdictApplying, rollout.VerdictSuperseded}},
		{Name: "webhook"},
	}
	if err := d.SetChannels(chans...); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "Slack", "my channel", "evidence", "forge-heads", "settled-time"} {
		if err := d.SetChannels(outbox.Channel{Name: bad}); err == nil {
			t.Fatalf("a channel named %q is taken", bad)
		}
	}
	k := rollout.Key{Cluster: "prod", Hash: "a"}
	shown := rollout.Shown{Revision: "main@sha1:a", Commit: "a", Done: 1, Expected: 3, RootCause: "flux-system/infra",
		Failure:   rollout.ShownFailure{Layer: "flux-system/apps", Release: rollout.Ref{Kind: "HelmRelease", Namespace: "web", Name: "x"}, Object: "Deployment/web/x", Reason: "InstallFailed", Message: "boom", Stalled: true},
		Completed: at, Late: true, SupersededBy: "main@sha1:b"}
	step := func(p rollout.Published, want map[string]uint64) {
		t.Helper()
		p.Key, p.At = k, at
		if p.Shown == (rollout.Shown{}) {
			p.Shown = shown
		}
		if err := d.Commit(&rollout.Batch{Published: []rollout.Published{p}, At: at}); err != nil {
			t.Fatal(err)
		}
		for _, ch := range chans {
			rec, ok, err := d.Channel(ch.Name).Publication(k)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Seq != want[ch.Name] || ok != (want[ch.Name] > 0) {
				t.Fatalf("after %+v: %s at seq %d (found %v), want %d", p, ch.Name, rec.Seq, ok, want[ch.Name])
			}
		}
	}
	step(rollout.Published{Verdict: rollout.VerdictApplying}, map[string]uint64{"forge": 1, "slack": 1, "webhook": 1})
	more := shown
	more.Done = 2
	step(rollout.Published{Verdict: rollout.VerdictApplying, Progress: true, Shown: more}, map[string]uint64{"forge": 1, "slack": 2, "webhook": 1})
	// The same progress again is nothing new.
	step(rollout.Published{Verdict: rollout.VerdictApplying, Progress: true, Shown: more}, map[string]uint64{"forge": 1, "slack": 2, "webhook": 1})
	// The progress was never written: the failure is the record's second
	// change.
	step(rollout.Published{Verdict: rollout.VerdictFailed}, map[string]uint64{"forge": 2, "slack": 2, "teams": 1, "webhook": 2})
	// Progress of applying, read before the failure was recorded, never
	// takes the verdict back.
	stale := shown
	stale.Done = 3
	step(rollout.Published{Verdict: rollout.VerdictApplying, Progress: true, Shown: stale}, map[string]uint64{"forge": 2, "slack": 2, "teams": 1, "webhook": 2})
	step(rollout.Published{Verdict: rollout.VerdictFailed, Restate: true}, map[string]uint64{"forge": 3, "slack": 3, "teams": 1, "webhook": 2})
	if err := d.Channel("slack").UpdatePublication(k, func(p *outbox.Publication) { p.SentSeq, p.Sent = p.Seq, p.Verdict }); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = open(t)
	for _, ch := range chans {
		ps, err := d.Channel(ch.Name).Publications()
		if err != nil {
			t.Fatal(err)
		}
		if want := ch.Name != "slack"; (len(ps) == 1) != want {
			t.Fatalf("%s: due %+v, want due %v", ch.Name, ps, want)
		}
		if len(ps) == 1 && ps[0].Shown != shown {
			t.Fatalf("%s: shown %+v, want %+v", ch.Name, ps[0].Shown, shown)
		}
	}
	if err := d.SetChannels(); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(&rollout.Batch{Published: []rollout.Published{{Key: rollout.Key{Cluster: "prod", Hash: "b"}, Verdict: rollout.VerdictApplying, At: at}}, At: at}); err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		if _, ok, _ := d.Channel(ch.Name).Publication(rollout.Key{Cluster: "prod", Hash: "b"}); ok {
			t.Fatalf("%s took a verdict with no channel configured", ch.Name)
		}
	}
}

// testForgeHeadsAndLastEvent: the forge's heads and the time of the last
// event of each cluster are kept across a reopen.
func testForgeHeadsAndLastEvent(t *testing.T, open Opener) {
	d := open(t)
	if h, err := d.Head("prod", "GitRepository/flux-system/app"); err != nil || h != "" {
		t.Fatalf("head before any: %q (%v)", h, err)
	}
	if last, err := d.LastEvent(""); err != nil || !last.IsZero() {
		t.Fatalf("last event before any: %v (%v)", last, err)
	}
	commit := strings.Repeat("e", 40)
	if err := d.SetHead("prod", "GitRepository/flux-system/app", commit); err != nil {
		t.Fatal(err)
	}
	eventAt := at.Add(1234567 * time.Nanosecond)
	stagingAt := eventAt.Add(time.Minute)
	if err := d.SetLastEvents(map[string]time.Time{"": eventAt, "staging": stagingAt}); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d = open(t)
	if h, err := d.Head("prod", "GitRepository/flux-system/app"); err != nil || h != commit {
		t.Fatalf("head %q (%v), want %s", h, err, commit)
	}
	if h, _ := d.Head("staging", "GitRepository/flux-system/app"); h != "" {
		t.Fatalf("another cluster's head: %q", h)
	}
	if last, err := d.LastEvent(""); err != nil || !last.Equal(eventAt) {
		t.Fatalf("last event %v (%v), want %v", last, err, eventAt)
	}
	if last, err := d.LastEvent("staging"); err != nil || !last.Equal(stagingAt) {
		t.Fatalf("staging's last event %v (%v), want %v", last, err, stagingAt)
	}
	if last, err := d.LastEvent("prod"); err != nil || !last.IsZero() {
		t.Fatalf("a cluster never heard from: last event %v (%v)", last, err)
	}

	// staging's Secret goes, prod's stays: staging's last event goes too,
	// the service's own stays whatever keep says.
	if err := d.SetLastEvents(map[string]time.Time{"prod": stagingAt, "prod-eu": stagingAt}); err != nil {
		t.Fatal(err)
	}
	var asked []string
	n, err := d.PruneLastEvents(func(cluster string) bool {
		asked = append(asked, cluster)
		return strings.HasPrefix(cluster, "prod")
	})
	if err != nil || n != 1 || !slices.Equal(asked, []string{"prod", "prod-eu", "staging"}) {
		t.Fatalf("pruned %d (%v), asked of %q: want staging alone pruned, of prod, prod-eu and staging", n, err, asked)
	}
	d.Close()
	d = open(t)
	for cluster, want := range map[string]time.Time{"": eventAt, "staging": {}, "prod": stagingAt, "prod-eu": stagingAt} {
		if last, err := d.LastEvent(cluster); err != nil || !last.Equal(want) {
			t.Fatalf("after the prune, %q's last event %v (%v), want %v", cluster, last, err, want)
		}
	}
}

// testFailedCommitWritesNothing: a transaction that fails after writing a
// whole batch leaves no part of it behind, and the store goes on.
func testFailedCommitWritesNothing(t *testing.T, open Opener) {
	d := open(t)
	k := rollout.Key{Cluster: "prod", Hash: strings.Repeat("ef", 20)}
	b := sampleBatch()
	b.Mails = []rollout.Mail{mailFor(k, rollout.MailApplying, "a@x")}
	b.Published = []rollout.Published{{Key: k, Verdict: rollout.VerdictApplying, At: at}}
	e, err := d.encode(b)
	if err != nil {
		t.Fatal(err)
	}
	boom := fmt.Errorf("boom")
	err = d.kv.update(func(tx txn) error {
		if err := d.commitTx(tx, b, e, b.Published); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("update: %v", err)
	}
	if l := loadAll(t, d); len(l.evidence) != 0 || len(l.mailed) != 0 || len(l.floors) != 0 {
		t.Fatalf("a failed transaction left %d evidence, %d mail keys, %d floors", len(l.evidence), len(l.mailed), len(l.floors))
	}
	if qs, _ := d.Pending(); len(qs) != 0 {
		t.Fatalf("a failed transaction left mails: %+v", qs)
	}
	if n, _ := d.SettledCount(); n != 0 {
		t.Fatalf("a failed transaction left %d settled", n)
	}
	if _, ok, _ := d.Channel("forge").Publication(k); ok {
		t.Fatal("a failed transaction left a forge record")
	}
	// And the store goes on.
	if err := d.Commit(b); err != nil {
		t.Fatal(err)
	}
	if qs, _ := d.Pending(); len(qs) != 1 {
		t.Fatalf("%d pending after the commit, want 1", len(qs))
	}
}

// testNewChannel: a channel the store was never told of has an outbox of
// its own as soon as it is configured (its buckets are named after it),
// kept across a reopen without being configured again, and purged by
// retention once configured no more; a store copied keeps it.
func testNewChannel(t *testing.T, open Opener) {
	d := open(t)
	if err := d.SetChannels(outbox.Channel{Name: "discord"}); err != nil {
		t.Fatal(err)
	}
	k := rollout.Key{Cluster: "prod", Hash: "a"}
	pub := rollout.Published{Key: k, Verdict: rollout.VerdictApplied, At: at, Shown: rollout.Shown{Revision: "main@sha1:a", Commit: "a"}}
	if err := d.Commit(&rollout.Batch{Published: []rollout.Published{pub}, At: at}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := d.Channel("forge").Publication(k); ok {
		t.Fatal("the forge, not configured, took the verdict")
	}
	d.Close()
	d = open(t) // told of no channel
	box := d.Channel("discord")
	ps, err := box.Publications()
	if err != nil || len(ps) != 1 || ps[0].Shown != pub.Shown {
		t.Fatalf("after a reopen, discord's due: %+v (%v)", ps, err)
	}
	if err := box.UpdatePublication(k, func(p *outbox.Publication) { p.SentSeq, p.Sent = p.Seq, p.Verdict }); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(&rollout.Batch{PurgeBefore: at.Add(time.Hour), At: at.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := box.Publication(k); ok {
		t.Fatal("retention kept the delivered verdict of a channel configured no more")
	}
}

// testProgressInMemory: progress (more layers applied) is no write of the
// outboxes: their reads show it at once, a delivery's record writes it
// first, a verdict committed since wins over it (its delivery, read
// before, leaves the verdict due), and a reopen forgets what no delivery
// wrote (the engine's reload publishes it again).
func testProgressInMemory(t *testing.T, open Opener) {
	d := open(t)
	if err := d.SetChannels(outbox.Channel{Name: "slack", Progress: true}); err != nil {
		t.Fatal(err)
	}
	k := rollout.Key{Cluster: "prod", Hash: strings.Repeat("ab", 20)}
	publish := func(v rollout.Verdict, done int, progress bool) {
		t.Helper()
		b := &rollout.Batch{At: at, Published: []rollout.Published{{Key: k, Verdict: v, At: at, Progress: progress, Shown: rollout.Shown{Done: done, Expected: 3}}}}
		if err := d.Commit(b); err != nil {
			t.Fatal(err)
		}
	}
	stored := func() outbox.Publication {
		t.Helper()
		var p outbox.Publication
		err := d.kv.view(func(tx txn) error {
			var err error
			p, _, err = getPublication(tx, bucketsOf("slack"), publicationKey(k))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	box := d.Channel("slack")
	publish(rollout.VerdictApplying, 0, false)
	publish(rollout.VerdictApplying, 1, true)
	if p := stored(); p.Seq != 1 || p.Done != 0 {
		t.Fatalf("the progress was written: %+v", p)
	}
	ps, err := box.Publications()
	if err != nil || len(ps) != 1 || ps[0].Seq != 2 || ps[0].Done != 1 {
		t.Fatalf("publications %+v (%v): want the progress, the record's second", ps, err)
	}
	sent := func(read outbox.Publication) func(*outbox.Publication) {
		return func(q *outbox.Publication) { q.SentSeq, q.Sent = max(q.SentSeq, q.Seq), read.Verdict }
	}
	if err := box.UpdatePublication(k, sent(ps[0])); err != nil {
		t.Fatal(err)
	}
	if p := stored(); p.Seq != 2 || p.Done != 1 || p.Due() {
		t.Fatalf("after the delivery's record: %+v, want the progress written and taken", p)
	}
	// Progress read, then a failure committed before its delivery is
	// recorded.
	publish(rollout.VerdictApplying, 2, true)
	ps, _ = box.Publications()
	publish(rollout.VerdictFailed, 2, false)
	if err := box.UpdatePublications([]outbox.Update{{Key: k, Apply: func(q *outbox.Publication) {
		q.Delivered(ps[0], at) // the dispatcher's record of that delivery
	}}}); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := box.Publication(k); p.Verdict != rollout.VerdictFailed || !p.Due() {
		t.Fatalf("the failure after a progress delivered: %+v, want it due", p)
	}
	publish(rollout.VerdictFailed, 3, true)
	d.Close()
	d = open(t)
	if p, ok, _ := d.Channel("slack").Publication(k); !ok || p.Done != 2 || p.Verdict != rollout.VerdictFailed {
		t.Fatalf("after a reopen: %+v, want the failure as committed, without the progress after it", p)
	}
}

// TestSuiteCoversTheContract: the store's contract is what the suite
// covers on every backend. Every exported method of DB and ChannelBox is
// called by a suite test (suite_test.go); Coordination, PostgreSQL's alone,
// has tests of its own with two handles (lease_test.go, postgres_test.go).
func TestSuiteCoversTheContract(t *testing.T) {
	src, err := os.ReadFile("suite_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[*DB](), reflect.TypeFor[ChannelBox]()} {
		for m := range typ.Methods() {
			if !strings.Contains(string(src), "."+m.Name+"(") {
				t.Errorf("%s.%s is in the store's contract and no suite test calls it", typ, m.Name)
			}
		}
	}
	var coordination []byte
	for _, f := range []string{"lease_test.go", "postgres_test.go", "coordination_test.go", "copy_test.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		coordination = append(coordination, b...)
	}
	for m := range reflect.TypeFor[*Coordination]().Methods() {
		if !strings.Contains(string(coordination), "."+m.Name+"(") {
			t.Errorf("Coordination.%s has no test", m.Name)
		}
	}
}

// testSize: the state's size is positive on every backend, and does not
// shrink as records are added.
func testSize(t *testing.T, open Opener) {
	d := open(t)
	before := d.Size()
	if before <= 0 {
		t.Fatalf("size %d", before)
	}
	for i := range 200 {
		if err := d.Commit(&rollout.Batch{Settle: []*rollout.View{settledView(i, at)}, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	if after := d.Size(); after < before {
		t.Fatalf("size %d after 200 settled rollouts, %d before", after, before)
	}
}
