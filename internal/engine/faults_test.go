package engine_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
)

// failingStore is the real store whose commits fail while fail is set, as
// on a full disk (reads go on working). The real full disk is
// cmd/flux-deploy-notifier's TestDiskFull; this one puts a batch that
// writes nothing between failures, which must not end the episode.
type failingStore struct {
	*store.DB
	fail atomic.Bool
}

func (s *failingStore) Commit(b *rollout.Batch) error {
	if s.fail.Load() {
		return fmt.Errorf("write state.db: %w", syscall.ENOSPC)
	}
	return s.DB.Commit(b)
}

// TestStoreFailureIsOneEpisode: failed commits, with batches that commit
// nothing among them, are one episode: logged once when it begins and once
// when a commit succeeds, counted, and described by StoreWarning while it
// lasts.
func TestStoreFailureIsOneEpisode(t *testing.T) {
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fs := &failingStore{DB: db}
	var logs syncbuf.Buffer
	clock := t0
	eng, err := engine.New(fs, rollout.Config{StuckAfter: time.Hour, Retention: 720 * time.Hour, Verify: true},
		slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range applied0 {
		if err := eng.Submit(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	fs.fail.Store(true)
	for i := range 20 {
		if err := eng.Submit(ctx, prog("infra", "R1", i)); !errors.Is(err, engine.ErrStore) {
			t.Fatalf("submit %d on a failing store: %v", i, err)
		}
		if err := eng.Settle(ctx); err != nil { // commits nothing, fails nothing
			t.Fatal(err)
		}
	}
	if w := eng.StoreWarning(); !strings.Contains(w, "storing fails since 2026-11-30T12:00:00Z") || !strings.Contains(w, "no space left on device") {
		t.Fatalf("warning while failing: %q", w)
	}
	if n, at := eng.CommitFailures(); n != 20 || !at.Equal(t0) {
		t.Fatalf("failures %d, last at %v", n, at)
	}
	fs.fail.Store(false)
	clock = t0.Add(time.Minute)
	if err := eng.Submit(ctx, succ("infra", "R1", 30)); err != nil {
		t.Fatal(err)
	}
	if w := eng.StoreWarning(); w != "" {
		t.Fatalf("warning after recovery: %q", w)
	}
	out := logs.String()
	if n := strings.Count(out, "store commits failing"); n != 1 {
		t.Errorf("episode begun %d times:\n%s", n, out)
	}
	if n := strings.Count(out, "store commits succeed again"); n != 1 || !strings.Contains(out, "failed_commits=20 for=1m0s") {
		t.Errorf("episode ended %d times:\n%s", n, out)
	}
	if v := eng.Get(rollout.Key{Cluster: "default", Hash: hashOf("R1")}); v == nil || v.Layers.Len() == 0 {
		t.Fatal("the commit after recovery was not applied")
	}
}
