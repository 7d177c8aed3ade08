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

// unreadableArchive is the real store whose archive reads fail while fail
// is set, as while PostgreSQL restarts, and counts them.
type unreadableArchive struct {
	*store.DB
	fail  atomic.Bool
	reads atomic.Int64
}

func (s *unreadableArchive) read() error {
	s.reads.Add(1)
	if s.fail.Load() {
		return errors.New("FATAL: the database system is shutting down (SQLSTATE 57P03)")
	}
	return nil
}

func (s *unreadableArchive) Settled(k rollout.Key) (*rollout.View, error) {
	if err := s.read(); err != nil {
		return nil, err
	}
	return s.DB.Settled(k)
}

func (s *unreadableArchive) SettledClusters() ([]string, error) {
	if err := s.read(); err != nil {
		return nil, err
	}
	return s.DB.SettledClusters()
}

func (s *unreadableArchive) SettledKeys(hash string, prefix, origin bool, cluster string, limit int) ([]rollout.Key, error) {
	if err := s.read(); err != nil {
		return nil, err
	}
	return s.DB.SettledKeys(hash, prefix, origin, cluster, limit)
}

// TestLiveLookupsWhileTheArchiveFails: a commit under way is answered
// from memory while the settled rollouts cannot be read (by full hash on
// its cluster without reading them at all); a settled or unknown commit
// is then an error, never "not found".
func TestLiveLookupsWhileTheArchiveFails(t *testing.T) {
	db, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := &unreadableArchive{DB: db}
	eng, err := engine.New(s, settleConfig(time.Minute), slog.New(slog.DiscardHandler), fixedClock(t0.Add(10*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range []rollout.Observation{succ("apps", "A", 0), succ("apps", "B", 3600)} {
		if err := eng.Submit(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, eng)
	if v, err := eng.Lookup(engine.Query{Hash: hashOf("A")}); err != nil || v.Verdict != rollout.VerdictApplied {
		t.Fatalf("A settled, read from the archive: %v, %v", v, err)
	}
	if live := eng.Live(); sum(live) != 1 {
		t.Fatalf("live %v, want B alone", live)
	}
	before := s.reads.Load()
	for _, q := range []engine.Query{{Hash: hashOf("B"), Cluster: "default"}, {Hash: hashOf("B")}} {
		if v, err := eng.Lookup(q); err != nil || v.Hash != hashOf("B") {
			t.Fatalf("B, %+v: %v, %v", q, v, err)
		}
	}
	if n := s.reads.Load() - before; n != 0 {
		t.Errorf("a live commit asked by full hash, on its cluster and on the only one there is, read the archive %d times", n)
	}

	s.fail.Store(true)
	for _, q := range []engine.Query{
		{Hash: hashOf("B")},
		{Hash: hashOf("B"), Cluster: "default"},
		{Hash: hashOf("B")[:8], Prefix: true},
	} {
		if v, err := eng.Lookup(q); err != nil || v.Hash != hashOf("B") || v.Verdict != rollout.VerdictApplied {
			t.Errorf("live commit, %+v, archive failing: %v, %v", q, v, err)
		}
	}
	if vs, err := eng.LookupAll(engine.Query{Hash: hashOf("B")}); err != nil || len(vs) != 1 {
		t.Errorf("every cluster of a live commit, archive failing: %v, %v", vs, err)
	}
	for _, label := range []string{"A", "never-seen"} {
		_, err := eng.Lookup(engine.Query{Hash: hashOf(label)})
		if err == nil || errors.Is(err, engine.ErrNotFound) || !strings.Contains(err.Error(), "shutting down") {
			t.Errorf("%s, archive failing: %v, want the archive's error", label, err)
		}
	}
	if _, err := eng.LookupAll(engine.Query{Hash: hashOf("A")}); err == nil || errors.Is(err, engine.ErrNotFound) {
		t.Errorf("every cluster of a settled commit, archive failing: %v, want the archive's error", err)
	}
}

// TestLiveLookupsOnSeveralClusters: a full hash live on one cluster and
// settled on another is read from the archive too (and is ambiguous
// without a cluster), whether the other cluster was known from the archive
// at start or from a live view since.
func TestLiveLookupsOnSeveralClusters(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	staging := func(label string, sec int) rollout.Observation {
		o := succ("apps", label, sec)
		o.Cluster = "staging"
		return o
	}
	clock := fixedClock(t0.Add(10 * time.Hour))
	eng, err := engine.New(db, settleConfig(time.Minute), slog.New(slog.DiscardHandler), clock)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, o := range []rollout.Observation{staging("A", 0), staging("B", 3600)} {
		if err := eng.Submit(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, eng) // A settled on staging
	var amb *engine.AmbiguousError
	if err := eng.Submit(ctx, succ("apps", "A", 7200)); err != nil { // A live on default
		t.Fatal(err)
	}
	if _, err := eng.Lookup(engine.Query{Hash: hashOf("A")}); !errors.As(err, &amb) || len(amb.Matches) != 2 {
		t.Fatalf("live on default, settled on staging (shown live since): %v, want ambiguous", err)
	}
	liveA := eng.Get(rollout.Key{Cluster: "default", Hash: hashOf("A")})
	db.Close()

	// A reader shown default's A alone knows staging from the archive.
	db, err = store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := engine.NewReader(db, slog.New(slog.DiscardHandler))
	r.Publish([]*rollout.View{liveA}, nil, false)
	if _, err := r.Lookup(engine.Query{Hash: hashOf("A")}); !errors.As(err, &amb) || len(amb.Matches) != 2 {
		t.Fatalf("live on default, settled on staging (from the archive): %v, want ambiguous", err)
	}
	if v, err := r.Lookup(engine.Query{Hash: hashOf("A"), Cluster: "default"}); err != nil || v.Cluster != "default" {
		t.Fatalf("A on default: %v, %v", v, err)
	}
}
