package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// What several replicas share beyond the records, with two handles on one
// database as two replicas have; the lease and the inbox are in
// lease_test.go and postgres_test.go.

// TestRequireLease: a replica that requires a lease commits nothing
// without one, and commits with the one it holds.
func TestRequireLease(t *testing.T) {
	a, _ := twoReplicas(t, PostgresOptions{})
	a.RequireLease()
	if err := a.Commit(evidenceBatch(strings.Repeat("1", 40))); !errors.Is(err, ErrFenced) {
		t.Fatalf("a commit without a lease: %v, want ErrFenced", err)
	}
	l := campaignUntil(t, a.Coordination, "a", time.Minute)
	a.Fence(&l)
	if err := a.Commit(evidenceBatch(strings.Repeat("2", 40))); err != nil {
		t.Fatalf("the leader's commit: %v", err)
	}
}

// TestViews: the leader's views are read by another replica: all of them
// at first (Reset), then each change after the version it read (a view
// written again, one removed), a replacement removing every view but those
// given; a write of a replica that lost the lease shows nothing.
func TestViews(t *testing.T) {
	a, b := twoReplicas(t, PostgresOptions{})
	ctx := context.Background()
	l := campaignUntil(t, a.Coordination, "a", time.Minute)
	a.Fence(&l)
	v1, v2, v3 := settledView(1, at), settledView(2, at), settledView(3, at)
	if err := a.WriteViews([]*rollout.View{v1, v2}, nil); err != nil {
		t.Fatal(err)
	}
	hashes := func(vs []*rollout.View) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Hash)
		}
		slices.Sort(out)
		return out
	}
	ch, err := b.ViewsSince(ctx, 0)
	if err != nil || !ch.Reset || !slices.Equal(hashes(ch.Views), hashes([]*rollout.View{v1, v2})) {
		t.Fatalf("b's first read: %+v %v, want every view", ch, err)
	}
	v2.Verdict = rollout.VerdictFailed
	if err := a.WriteViews([]*rollout.View{v2, v3}, []rollout.Key{v1.Key()}); err != nil {
		t.Fatal(err)
	}
	next, err := b.ViewsSince(ctx, ch.Version)
	if err != nil || next.Reset || len(next.Views) != 2 || !slices.Equal(next.Removed, []rollout.Key{v1.Key()}) {
		t.Fatalf("the changes after version %d: %+v %v", ch.Version, next, err)
	}
	for _, v := range next.Views {
		if v.Hash == v2.Hash && v.Verdict != rollout.VerdictFailed {
			t.Fatalf("v2 read as %v, want its change", v.Verdict)
		}
	}
	if err := a.ReplaceViews([]*rollout.View{v3}); err != nil {
		t.Fatal(err)
	}
	last, err := b.ViewsSince(ctx, next.Version)
	if err != nil || !slices.Equal(last.Removed, []rollout.Key{v2.Key()}) {
		t.Fatalf("after a replacement: %+v %v, want v2 removed", last, err)
	}
	if err := a.Resign(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteViews([]*rollout.View{v1}, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("a view written without the lease: %v, want ErrFenced", err)
	}
	if after, err := b.ViewsSince(ctx, last.Version); err != nil || len(after.Views)+len(after.Removed) != 0 {
		t.Fatalf("after a fenced write: %+v %v, want no change", after, err)
	}
}

// TestLoginFailuresCounted: every replica counts the login form's wrong
// tokens in one window.
func TestLoginFailuresCounted(t *testing.T) {
	a, b := twoReplicas(t, PostgresOptions{})
	for range 3 {
		if err := a.LoginFailed(); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := b.LoginFailed(); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []replicaHandle{a, b} {
		if n, err := h.LoginFailures(); err != nil || n != 5 {
			t.Fatalf("failures: %d %v, want the five of both replicas", n, err)
		}
	}
}

// TestPing: PostgreSQL answers while it runs; stopped, Ping fails within
// the store's timeout instead of waiting on a connection.
func TestPing(t *testing.T) {
	srv := pgtest.Start(t)
	a := openReplica(t, srv.NewDatabase(t), PostgresOptions{Timeout: 2 * time.Second})
	if err := a.Ping(context.Background()); err != nil {
		t.Fatalf("Ping with PostgreSQL up: %v", err)
	}
	srv.Stop()
	if err := a.Ping(context.Background()); err == nil {
		t.Fatal("Ping with PostgreSQL down succeeded")
	}
	srv.Resume(t)
	if err := a.Ping(context.Background()); err != nil {
		t.Fatalf("Ping with PostgreSQL back: %v", err)
	}
}
