package blind_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/blind"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

func silenceMails(t *testing.T, db *store.DB) int {
	t.Helper()
	qs, err := db.Pending()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range qs {
		if q.Mail.Kind == rollout.MailBlind {
			n++
		}
	}
	return n
}

// warning is w's one warning, "" when it has none.
func warning(w *blind.Watchdog) string {
	return strings.Join(w.Warnings(), "\n")
}

func TestWatchdog(t *testing.T) {
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := enginetest.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	layers := 3
	woke := 0
	reg := prometheus.NewRegistry()
	w, err := blind.New(30*time.Minute, "prod", func() int { return layers }, db, []string{"ops@example.com"},
		func() { woke++ }, slog.New(slog.NewTextHandler(io.Discard, nil)), c.Now, reg)
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		v, err := testutil.GatherAndCount(reg, "fdn_flux_events_silent")
		if err != nil || v != 1 {
			t.Fatalf("gauge missing: %v", err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "fdn_flux_events_silent" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}

	w.Event("")
	c.Add(29 * time.Minute)
	w.Check()
	if warning(w) != "" || gauge() != 0 || silenceMails(t, db) != 0 {
		t.Fatal("silent before --blind-after")
	}
	w.StatusMoved("prod")
	c.Add(2 * time.Minute)
	w.Check()
	if !strings.Contains(warning(w), "cluster prod: no event from notification-controller") || !strings.Contains(warning(w), "status last moved") || gauge() != 1 {
		t.Fatalf("warning %q, gauge %v", warning(w), gauge())
	}
	c.Add(time.Hour)
	w.Check()
	if n := silenceMails(t, db); n != 1 || woke != 1 {
		t.Fatalf("%d mails, %d wake-ups for one episode", n, woke)
	}

	w.Event("") // the pipe works again
	w.Check()
	if warning(w) != "" || gauge() != 0 {
		t.Fatal("still silent after an event")
	}
	c.Add(31 * time.Minute)
	w.Check()
	if n := silenceMails(t, db); n != 2 {
		t.Fatalf("a second episode made %d mails in all, want 2", n)
	}

	layers = 0 // no layers: silence is just quiet
	w.Event("")
	c.Add(2 * time.Hour)
	w.Check()
	if warning(w) != "" {
		t.Fatal("silent without layers")
	}
}

// TestSilenceAcrossRestarts: a silence that spans a restart is one episode
// with one mail; after a restart the service waits --blind-after before
// it says anything; and an event that ends an episode is recorded at once,
// so that a crash right after it cannot make a later episode reuse the
// mailed one's key (and its mail be dropped as sent).
func TestSilenceAcrossRestarts(t *testing.T) {
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := enginetest.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	start := func() *blind.Watchdog {
		w, err := blind.New(30*time.Minute, "prod", func() int { return 3 }, db, []string{"ops@example.com"},
			nil, slog.New(slog.NewTextHandler(io.Discard, nil)), c.Now, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return w
	}

	w := start()
	w.Event("")
	lastEvent := c.Now()
	c.Add(31 * time.Minute)
	w.Check()
	if n := silenceMails(t, db); n != 1 {
		t.Fatalf("%d mails for the first episode", n)
	}

	c.Add(2 * time.Hour) // the service restarts while Flux stays silent
	w = start()
	w.Check()
	if warning(w) != "" {
		t.Fatal("silent at once after a restart: notification-controller had no time to deliver")
	}
	c.Add(31 * time.Minute)
	w.Check()
	if !strings.Contains(warning(w), "since "+lastEvent.Format(time.RFC3339)) {
		t.Fatalf("warning %q does not give the last event before the restart", warning(w))
	}
	if n := silenceMails(t, db); n != 1 {
		t.Fatalf("a silence spanning a restart made %d mails, want 1", n)
	}

	w.Event("") // the pipe works again, and the process dies before any check
	if got, err := db.LastEvent(""); err != nil || !got.Equal(c.Now()) {
		t.Fatalf("the event ending an episode was not recorded at once: %v, %v", got, err)
	}
	c.Add(time.Minute)
	w = start()
	c.Add(31 * time.Minute)
	w.Check()
	if n := silenceMails(t, db); n != 2 {
		t.Fatalf("a new episode after a crash made %d mails in all, want 2", n)
	}
}

// TestEachClusterItsOwnPipe: a hub watches the pipe of every cluster it
// reads. A registered cluster silent while the service's own talks is
// named alone, mailed once under its own key (though its silence began
// with the service's own), its gauge labelled with it; a cluster its
// reader cannot read, or known by events alone, is never called blind;
// one forgotten stops being watched; each cluster's last event is kept
// apart across a restart, and deleted once its Secret is gone (Prune).
func TestEachClusterItsOwnPipe(t *testing.T) {
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c := enginetest.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	w, err := blind.New(30*time.Minute, "prod", func() int { return 3 }, db, []string{"ops@example.com"},
		nil, slog.New(slog.NewTextHandler(io.Discard, nil)), c.Now, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Watch("prod", func() (int, bool) { return 1, true }); err == nil {
		t.Fatal("the service's own cluster watched again as a registered one")
	}
	for _, name := range []string{"staging", "edge"} {
		if err := w.Watch(name, func() (int, bool) { return 5, true }); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Watch("unread", func() (int, bool) { return 0, false }); err != nil { // its reader fails
		t.Fatal(err)
	}
	silent := func() map[string]float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if mf.GetName() != "fdn_flux_events_silent" {
				continue
			}
			for _, m := range mf.GetMetric() {
				out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
		return out
	}

	// Events from the service's own cluster (no metadata.cluster), from
	// edge by name, and from a cluster known by events alone; staging and
	// unread are silent.
	for range 40 {
		c.Add(time.Minute)
		w.Event("")
		w.Event("edge")
		w.Event("events-only")
		w.Check()
	}
	warnings := w.Warnings()
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "cluster staging: no event from notification-controller since 2026-11-30T12:00:00Z while 5 layers exist") {
		t.Fatalf("warnings %q, want staging's alone", warnings)
	}
	if w.WarningOf("staging") != warnings[0] || w.WarningOf("edge") != "" || w.WarningOf("") != "" || w.WarningOf("events-only") != "" {
		t.Fatalf("warnings by cluster: staging %q, edge %q, the service's own %q", w.WarningOf("staging"), w.WarningOf("edge"), w.WarningOf(""))
	}
	if got := silent(); got["staging"] != 1 || got["prod"] != 0 || got["edge"] != 0 || got["unread"] != 0 || len(got) != 4 {
		t.Fatalf("fdn_flux_events_silent %v", got)
	}
	qs, err := db.Pending()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Mail.Blind == nil {
		t.Fatalf("mails %+v, want staging's one", qs)
	}
	if k, err := rollout.ParseMailKey(qs[0].Mail.Key); err != nil || k.Cluster != "staging" {
		t.Fatalf("the mail's key %q names cluster %q (%v)", qs[0].Mail.Key, k.Cluster, err)
	}

	// The service's own falls silent too: its episode began when
	// staging's did, and is mailed all the same.
	c.Add(31 * time.Minute)
	w.Check()
	if n := silenceMails(t, db); n != 3 { // staging; prod and edge now
		t.Fatalf("%d mails, want staging's, prod's and edge's", n)
	}
	if warnings := w.Warnings(); len(warnings) != 3 || !strings.HasPrefix(warnings[0], "cluster prod:") {
		t.Fatalf("warnings %q: want the service's own first, then edge and staging", warnings)
	}

	// edge's reader fails (unreachable) and reads it again: meanwhile its
	// silence is not told (its reader's failure is), nor said to end; once
	// read again, it is the same episode, not mailed again.
	if err := w.Watch("edge", func() (int, bool) { return 0, false }); err != nil {
		t.Fatal(err)
	}
	w.Check()
	if warnings := w.Warnings(); len(warnings) != 2 || strings.Contains(strings.Join(warnings, "\n"), "cluster edge") {
		t.Fatalf("warnings %q while edge is not read", warnings)
	}
	if err := w.Watch("edge", func() (int, bool) { return 5, true }); err != nil {
		t.Fatal(err)
	}
	c.Add(time.Minute)
	w.Check()
	if warnings := w.Warnings(); len(warnings) != 3 || silenceMails(t, db) != 3 {
		t.Fatalf("warnings %q, %d mails once edge is read again", warnings, silenceMails(t, db))
	}

	// staging's Secret is removed: it is no longer watched.
	w.Forget("staging")
	w.Check()
	if got := silent(); len(got) != 3 || got["staging"] != 0 {
		t.Fatalf("a forgotten cluster still watched: %v", got)
	}

	// A restart: each cluster's last event was kept apart.
	if got, err := db.LastEvent("edge"); err != nil || !got.Equal(time.Date(2026, 11, 30, 12, 40, 0, 0, time.UTC)) {
		t.Fatalf("edge's last event %v (%v)", got, err)
	}
	if got, err := db.LastEvent("events-only"); err != nil || !got.IsZero() {
		t.Fatalf("a cluster not watched recorded: %v (%v)", got, err)
	}

	// A cluster whose Secret went while the service was down left its
	// last event: pruned once the registry knows every Secret, while the
	// clusters registered or watched keep theirs.
	if err := db.SetLastEvents(map[string]time.Time{"gone": c.Now(), "registered": c.Now()}); err != nil {
		t.Fatal(err)
	}
	w.Prune(func(cluster string) bool { return cluster == "registered" })
	for cluster, kept := range map[string]bool{"gone": false, "registered": true, "edge": true, "": true} {
		if got, err := db.LastEvent(cluster); err != nil || got.IsZero() == kept {
			t.Fatalf("after the prune, %q's last event %v (%v), want kept %v", cluster, got, err, kept)
		}
	}
}
