package ancestry_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ancestry"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ancestry/gittest"
)

func open(t *testing.T, dir string) *ancestry.Repo {
	t.Helper()
	r, err := ancestry.Open(context.Background(), os.Getenv("PATH"), dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func commit(t *testing.T, r *ancestry.Repo, rev string) ancestry.Commit {
	t.Helper()
	c, err := r.Commit(context.Background(), rev)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestContains: git's answer, in a full clone and in a shallow one that
// must fetch and deepen to give it.
func TestContains(t *testing.T) {
	origin := gittest.New(t)
	base := origin.Commit("base")
	a := origin.Commit("a")
	full := origin.Clone(0)
	shallow := origin.Clone(1) // CI's checkout of a: nothing newer, no history
	b := origin.Commit("b")    // merged after a within one source interval
	origin.Branch("feature", a)
	f := origin.Commit("feature work")
	origin.Checkout("main")
	c := origin.Commit("c")
	m := origin.Merge("feature") // a merge commit: f is its second parent's
	origin.Branch("other", base)
	other := origin.Commit("on another branch")
	origin.Checkout("main")

	for _, dir := range []struct{ name, dir string }{{"full", full}, {"shallow", shallow}} {
		t.Run(dir.name, func(t *testing.T) {
			r := open(t, dir.dir)
			ca := commit(t, r, a)
			if ca.Hash != a || ca.Time.IsZero() {
				t.Fatalf("commit %+v, want %s with its time", ca, a)
			}
			for _, tt := range []struct {
				name, descendant string
				ancestor         string
				want             bool
			}{
				{"a child", b, a, true},
				{"a grandchild", c, a, true},
				{"itself", a, a, true},
				{"a parent", base, a, false},
				{"another branch", other, a, false},
				{"through a merge's second parent", m, f, true},
				{"a merge's first-parent history", m, b, true},
				{"a branch the merge did not take", other, f, false},
			} {
				anc := ca
				if tt.ancestor != a {
					anc = commit(t, open(t, origin.Dir), tt.ancestor)
				}
				got, err := r.Contains(context.Background(), tt.descendant, anc)
				if err != nil || got != tt.want {
					t.Fatalf("%s: Contains = %t, %v; want %t", tt.name, got, err, tt.want)
				}
			}
		})
	}

	t.Run("shallow clone stays bounded", func(t *testing.T) {
		// A fetch deepens only back to before the ancestor's time: with
		// commits far older than it, the clone stays shallow.
		old := gittest.New(t)
		ancient := old.CommitAt("ancient", time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
		x := old.Commit("x")
		dir := old.Clone(1)
		y := old.Commit("y")
		r := open(t, dir)
		got, err := r.Contains(context.Background(), y, commit(t, r, x))
		if err != nil || !got {
			t.Fatalf("Contains = %t, %v", got, err)
		}
		if gittest.Git(t, dir, "rev-parse", "--is-shallow-repository") != "true" || gittest.Has(dir, ancient) {
			t.Fatal("the clone fetched history older than the ancestor")
		}
	})

	t.Run("both here, the history between them not", func(t *testing.T) {
		// A checkout of a newer head asked about an older commit, which
		// Commit fetches alone: git must deepen before saying no.
		r := open(t, origin.Clone(1))
		got, err := r.Contains(context.Background(), m, commit(t, r, a))
		if err != nil || !got {
			t.Fatalf("Contains = %t, %v", got, err)
		}
	})

	t.Run("a commit of another repository", func(t *testing.T) {
		r := open(t, shallow)
		elsewhere := strings.Repeat("1234abcd", 5)
		got, err := r.Contains(context.Background(), elsewhere, commit(t, r, a))
		if got || err == nil || !strings.Contains(err.Error(), "fetch 1234abc") {
			t.Fatalf("Contains = %t, %v; want an error fetching it", got, err)
		}
	})

	t.Run("no remote", func(t *testing.T) {
		r := open(t, origin.Dir)
		got, err := r.Contains(context.Background(), strings.Repeat("ab", 20), commit(t, r, a))
		if got || err == nil || !strings.Contains(err.Error(), "no remote") {
			t.Fatalf("Contains = %t, %v", got, err)
		}
	})

	t.Run("a prefix resolves, a missing full hash is fetched", func(t *testing.T) {
		r := open(t, shallow)
		if got := commit(t, r, a[:9]); got.Hash != a {
			t.Fatalf("prefix resolved to %s", got.Hash)
		}
		if got := commit(t, open(t, origin.Clone(1)), b); got.Hash != b {
			t.Fatalf("fetched %s", got.Hash)
		}
		if _, err := r.Commit(context.Background(), "0000000"); err == nil {
			t.Fatal("a prefix of no commit resolved")
		}
	})
}

// TestOpenSaysWhyGitCannotAnswer: no git on PATH, or no repository.
func TestOpenSaysWhyGitCannotAnswer(t *testing.T) {
	_, err := ancestry.Open(context.Background(), t.TempDir(), ".")
	if !errors.Is(err, ancestry.ErrUnavailable) || !strings.Contains(err.Error(), "git is not installed") {
		t.Fatalf("no git: %v", err)
	}
	gittest.New(t) // git is here
	_, err = ancestry.Open(context.Background(), os.Getenv("PATH"), t.TempDir())
	if !errors.Is(err, ancestry.ErrUnavailable) || !strings.Contains(err.Error(), "not in a git repository") {
		t.Fatalf("no repository: %v", err)
	}
}
