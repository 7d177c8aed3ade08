package store_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// withoutSince is a JSON list of views without the layers' "since".
func withoutSince(t *testing.T, b []byte) string {
	t.Helper()
	var views []map[string]any
	if err := json.Unmarshal(b, &views); err != nil {
		t.Fatal(err)
	}
	for _, v := range views {
		layers, _ := v["layers"].([]any)
		for _, l := range layers {
			delete(l.(map[string]any), "since")
		}
	}
	out, err := json.MarshalIndent(views, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestUpgrade opens data dirs written by earlier releases (every fixture
// scenario, with mail, at the clock below) and checks that the upgraded
// engine gives the same views they gave, with the settled ones read from
// the archive, and the same mails: testdata/v1, by the release before
// schema 2; testdata/v3, by the last release of schema 3 (bcd3250; closed
// cleanly, so its write-ahead log was empty and is left out; the file
// compacted with bbolt's Compact to keep it small); testdata/v4, by the last
// release of schema 4 (72f9674, the same way), its live rollouts' evidence
// in JSON records.
func TestUpgrade(t *testing.T) {
	for _, from := range []string{"v1", "v3", "v4"} {
		t.Run(from, func(t *testing.T) { testUpgrade(t, from) })
	}
}

func testUpgrade(t *testing.T, from string) {
	dir := t.TempDir()
	copyFile(t, filepath.Join("testdata", from, store.FileName), filepath.Join(dir, store.FileName))
	want, err := os.ReadFile(filepath.Join("testdata", from, "views.json"))
	if err != nil {
		t.Fatal(err)
	}
	// The clock and configuration the v1 views were computed with.
	now := time.Date(2026, 11, 30, 14, 49, 0, 0, time.UTC)
	// The records before schema 6 name an emitter's kind, not its role:
	// the service gives it from the kind, as here.
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: []string{"dev@example.com"},
		RoleOf: ingest.RoleOf}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	outbox := -1
	for run := range 2 {
		db, err := store.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if outbox < 0 {
			pending, err := db.Pending()
			if err != nil {
				t.Fatal(err)
			}
			outbox = len(pending)
		}
		e, err := engine.New(db, cfg, log, func() time.Time { return now })
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.MarshalIndent(enginetest.List(t, e, "", 1<<20), "", " ")
		if err != nil {
			t.Fatal(err)
		}
		// Layers gained their first evidence ("since") after them: the rest
		// must be as it was.
		if g, w := withoutSince(t, got), withoutSince(t, want); g != w {
			t.Fatalf("run %d: views after the upgrade differ from %s's:\n%s", run, from, g)
		}
		n, err := db.SettledCount()
		if err != nil || n == 0 {
			t.Fatalf("run %d: %d settled (%v): the upgrade settled nothing", run, n, err)
		}
		live := 0
		for _, c := range e.Live() {
			live += c
		}
		if live >= len(enginetest.List(t, e, "", 1<<20)) {
			t.Fatalf("run %d: %d live rollouts of %d", run, live, len(enginetest.List(t, e, "", 1<<20)))
		}
		// The mails the old release made due are all there, and none
		// again: its de-duplication keys still match.
		pending, err := db.Pending()
		if err != nil || len(pending) == 0 || len(pending) != outbox {
			t.Fatalf("run %d: %d mails in the outbox (%v), %s left %d", run, len(pending), err, from, outbox)
		}
		db.Close()
	}
}

// TestRetentionReturnsSpace: settled rollouts past the retention are
// purged with their indexes, and a file left mostly free is compacted when
// it is opened again.
func TestRetentionReturnsSpace(t *testing.T) {
	dir := t.TempDir()
	db, err := store.OpenCompactingAbove(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for batch := range 20 {
		var views []*rollout.View
		for i := range 100 {
			n := batch*100 + i
			v := store.SettledView(n, t0.Add(time.Duration(n)*time.Minute))
			// Incompressible, as many different messages are.
			v.Summary = fmt.Sprintf("%x", sha(n))
			views = append(views, v)
		}
		if err := db.Commit(&rollout.Batch{Settle: views, At: t0}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := db.SettledCount(); n != 2000 {
		t.Fatalf("%d settled, want 2000", n)
	}
	// Keep the last 100: rollouts 1900 and on began at or after the cutoff.
	cutoff := t0.Add(1900 * time.Minute)
	if err := db.Commit(&rollout.Batch{PurgeBefore: cutoff, At: t0}); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.SettledCount(); n != 100 {
		t.Fatalf("%d settled after the purge, want 100", n)
	}
	if v, _ := db.Settled(rollout.Key{Cluster: "default", Hash: fmt.Sprintf("%040x", 1899)}); v != nil {
		t.Fatal("a rollout past the retention is still there")
	}
	if v, _ := db.Settled(rollout.Key{Cluster: "default", Hash: fmt.Sprintf("%040x", 1900)}); v == nil {
		t.Fatal("a rollout within the retention was purged")
	}
	var got []*rollout.View
	if err := db.ScanSettled("", time.Time{}, func(v *rollout.View) bool { got = append(got, v); return true }); err != nil ||
		len(got) != 100 || got[0].Hash != fmt.Sprintf("%040x", 1999) {
		t.Fatalf("ScanSettled after the purge: %d (%v)", len(got), err)
	}
	// The bbolt file: the log beside it keeps its preallocated size.
	fileSize := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, store.FileName))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := fileSize()
	db.Close()
	db, err = store.OpenCompactingAbove(dir, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if after := fileSize(); after*2 > before {
		t.Fatalf("file %d bytes before compaction, %d after: not returned", before, after)
	}
	if n, _ := db.SettledCount(); n != 100 {
		t.Fatalf("%d settled after compaction, want 100", n)
	}
}

func sha(n int) []byte {
	out := make([]byte, 0, 2048)
	x := uint64(n)*0x9E3779B97F4A7C15 + 1
	for len(out) < cap(out) {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		out = append(out, byte(x))
	}
	return out
}
