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
	w, err := blind.New(30*time.Minute, func() int { return layers }, db, []string{"ops@example.com"},
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

	w.Event()
	c.Add(29 * time.Minute)
	w.Check()
	if w.Warning() != "" || gauge() != 0 || silenceMails(t, db) != 0 {
		t.Fatal("silent before --blind-after")
	}
	w.StatusMoved()
	c.Add(2 * time.Minute)
	w.Check()
	if !strings.Contains(w.Warning(), "no event from notification-controller") || !strings.Contains(w.Warning(), "status last moved") || gauge() != 1 {
		t.Fatalf("warning %q, gauge %v", w.Warning(), gauge())
	}
	c.Add(time.Hour)
	w.Check()
	if n := silenceMails(t, db); n != 1 || woke != 1 {
		t.Fatalf("%d mails, %d wake-ups for one episode", n, woke)
	}

	w.Event() // the pipe works again
	w.Check()
	if w.Warning() != "" || gauge() != 0 {
		t.Fatal("still silent after an event")
	}
	c.Add(31 * time.Minute)
	w.Check()
	if n := silenceMails(t, db); n != 2 {
		t.Fatalf("a second episode made %d mails in all, want 2", n)
	}

	layers = 0 // no layers: silence is just quiet
	w.Event()
	c.Add(2 * time.Hour)
	w.Check()
	if w.Warning() != "" {
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
		w, err := blind.New(30*time.Minute, func() int { return 3 }, db, []string{"ops@example.com"},
			nil, slog.New(slog.NewTextHandler(io.Discard, nil)), c.Now, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return w
	}

	w := start()
	w.Event()
	lastEvent := c.Now()
	c.Add(31 * time.Minute)
	w.Check()
	if n := silenceMails(t, db); n != 1 {
		t.Fatalf("%d mails for the first episode", n)
	}

	c.Add(2 * time.Hour) // the service restarts while Flux stays silent
	w = start()
	w.Check()
	if w.Warning() != "" {
		t.Fatal("silent at once after a restart: notification-controller had no time to deliver")
	}
	c.Add(31 * time.Minute)
	w.Check()
	if !strings.Contains(w.Warning(), "since "+lastEvent.Format(time.RFC3339)) {
		t.Fatalf("warning %q does not give the last event before the restart", w.Warning())
	}
	if n := silenceMails(t, db); n != 1 {
		t.Fatalf("a silence spanning a restart made %d mails, want 1", n)
	}

	w.Event() // the pipe works again, and the process dies before any check
	if got, err := db.LastEvent(); err != nil || !got.Equal(c.Now()) {
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
