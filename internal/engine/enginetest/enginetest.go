// Package enginetest runs a real engine on a real bbolt file for tests of
// the packages around it.
package enginetest

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// The store is the engine's.
var _ engine.Store = (*store.DB)(nil)

// Engine is an engine under test and its store.
type Engine struct {
	*engine.Engine
	DB  *store.DB
	Dir string
	// Run starts the engine's Run loop (Start does unless told not to).
	Run func()
	// Stop ends Run and closes the store; the test's cleanup calls it too.
	Stop func()
}

// Start opens a store in dir and an engine on it, runs the engine unless
// run is false, and stops everything when the test ends.
func Start(t testing.TB, dir string, cfg rollout.Config, now func() time.Time, run bool) *Engine {
	t.Helper()
	db, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Tests check every incremental evaluation; benchmarks measure it.
	if _, bench := t.(*testing.B); !bench {
		cfg.Verify = true
	}
	e, err := engine.New(db, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), now)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var started, stopped sync.Once
	te := &Engine{Engine: e, DB: db, Dir: dir}
	te.Run = func() {
		started.Do(func() {
			go func() {
				defer close(done)
				if err := e.Run(ctx); err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
		})
	}
	te.Stop = func() {
		stopped.Do(func() {
			cancel()
			ran := true
			started.Do(func() { ran = false })
			if ran {
				<-done
			}
			db.Close()
		})
	}
	t.Cleanup(te.Stop)
	if run {
		te.Run()
	}
	return te
}

// Queued lists the mails waiting in the outbox about the rollout of hash,
// as "kind [layer] [object] [reason] recipient" lines, sorted.
func (e *Engine) Queued(t testing.TB, hash string) []string {
	t.Helper()
	qs, err := e.DB.Pending()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, q := range qs {
		if q.Mail.View == nil || q.Mail.View.Hash != hash {
			continue
		}
		line := string(q.Mail.Kind)
		if q.Mail.Layer != "" {
			line += " " + q.Mail.Layer
		}
		if o := q.Mail.Object; o != nil {
			line += " " + o.Kind + "/" + o.Namespace + "/" + o.Name
		}
		if q.Mail.Reason != "" {
			line += " " + q.Mail.Reason
		}
		out = append(out, line+" "+q.Mail.To)
	}
	slices.Sort(out)
	return out
}

// List returns up to limit rollouts of e, newest first, of one cluster or
// all: the first page of the list.
func List(t testing.TB, e *engine.Engine, cluster string, limit int) []*rollout.View {
	t.Helper()
	p, err := e.Page(engine.PageQuery{Cluster: cluster, Limit: limit})
	if err != nil {
		t.Fatalf("list rollouts: %v", err)
	}
	return p.Views
}
