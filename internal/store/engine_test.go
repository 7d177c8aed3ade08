package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// TestEngineOnEveryBackend: the engine on each backend decides the same
// views and mails for the example rollouts, settles them, and after a
// reopen gives the same views again, the settled ones read from the
// archive.
func TestEngineOnEveryBackend(t *testing.T) {
	var results []outcome
	for _, b := range store.Backends {
		t.Run(b.Name, func(t *testing.T) {
			open := b.Start(t)(t)
			now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: []string{"dev@example.com"},
				RoleOf: ingest.RoleOf, CommitOf: flux.GitCommit, Verify: true}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			var clock time.Time
			views := func(e *engine.Engine) string {
				t.Helper()
				v, err := json.Marshal(enginetest.List(t, e, "", 1000))
				if err != nil {
					t.Fatal(err)
				}
				return string(v)
			}
			mails := func(db *store.DB) string {
				t.Helper()
				qs, err := db.Pending()
				if err != nil {
					t.Fatal(err)
				}
				var keys []string
				for _, q := range qs {
					keys = append(keys, q.Mail.Key)
				}
				slices.Sort(keys)
				v, _ := json.Marshal(keys)
				return string(v)
			}
			db := open(t)
			e, err := engine.New(db, cfg, log, func() time.Time { return clock })
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range enginetest.ExampleObservations(now.Add(-time.Hour)) {
				clock = o.At.Add(time.Minute)
				if err := e.Submit(context.Background(), o); err != nil {
					t.Fatal(err)
				}
			}
			clock = now.Add(24 * time.Hour) // quiet past SettleAfter
			if err := e.Settle(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n, err := db.SettledCount(); err != nil || n == 0 {
				t.Fatalf("%d settled (%v)", n, err)
			}
			// Twice reopened: the first turns the stuck rollout stuck (its
			// deadline passed while the engine was not running), the
			// second changes nothing.
			var got outcome
			for run := range 2 {
				db.Close()
				db = open(t)
				e, err = engine.New(db, cfg, log, func() time.Time { return clock })
				if err != nil {
					t.Fatal(err)
				}
				again := outcome{views(e), mails(db)}
				if run == 1 && again != got {
					t.Fatalf("after another reopen: %s", differ(again, got))
				}
				got = again
			}
			results = append(results, got)
		})
	}
	for i := 1; i < len(results); i++ {
		if results[i] != results[0] {
			t.Fatalf("%s decided otherwise than %s: %s", store.Backends[i].Name, store.Backends[0].Name, differ(results[i], results[0]))
		}
	}
}

type outcome struct{ views, mails string }

// differ says where two outcomes part.
func differ(a, b outcome) string {
	for _, p := range [][3]string{{"views", a.views, b.views}, {"mails", a.mails, b.mails}} {
		x, y := p[1], p[2]
		i := 0
		for i < len(x) && i < len(y) && x[i] == y[i] {
			i++
		}
		if x != y {
			return fmt.Sprintf("%s differ at byte %d: %.200q against %.200q", p[0], i, x[max(i-80, 0):], y[max(i-80, 0):])
		}
	}
	return "equal"
}
