package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// releases are the releases a rolling update may come from, by their
// commits: 90c51c0, the first whose leader keeps the inbox for its
// followers' engines, 590ca9a, 481a5ac, d2b484a, 3da89f3, 31e889f and
// cf2363e, the one before this. Add each release as it lands; drop one only with what
// this release stops doing for it (8ec1646 went when this release's leader
// stopped writing the views its followers read).
var releases = []string{
	"90c51c09bf23be26567663394ec44a39e1a38a93",
	"590ca9a8f756aa7af5e7c2dc100ac3fc5a01df7e",
	"481a5ac7f5df08f05062707e0a4b6c8ce712166e",
	"d2b484a3836067acb61c13c2fe88ea0f53cc0b26",
	"3da89f3a30411d53b065a935ef62592d4e238842",
	"31e889fdcad95162305239267557542ec1631736",
	"cf2363e208b7e5fb184efadb3fc845dfa5ef743d",
}

// buildRelease builds the service of an earlier commit of this
// repository, from git's copy of it (git archive into bin/releases: no
// work tree is touched). It skips the test when a shallow clone does not
// have the commit.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not a git clone: %v", err)
	}
	root := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		if shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output(); strings.TrimSpace(string(shallow)) == "true" {
			t.Skipf("this shallow clone does not have the release %s", commit)
		}
		t.Fatalf("the release %s is not a commit of this repository: %v", commit, err)
	}
	// A directory of its own that stays (bin/ is not tracked): the build
	// cache keeps what it compiled there, as it keeps the dependencies
	// buildBinary compiled, and the next run builds in seconds.
	src := filepath.Join(root, "bin", "releases", commit)
	if _, err := os.Stat(filepath.Join(src, ".extracted")); err != nil {
		tar := filepath.Join(t.TempDir(), "release.tar")
		if out, err := exec.Command("git", "-C", root, "archive", "-o", tar, commit).CombinedOutput(); err != nil {
			t.Fatalf("git archive %s: %v\n%s", commit, err, out)
		}
		if err := os.RemoveAll(src); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("tar", "-xf", tar, "-C", src).CombinedOutput(); err != nil {
			t.Fatalf("extract %s: %v\n%s", commit, err, out)
		}
		if err := os.WriteFile(filepath.Join(src, ".extracted"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Not stamped with this repository's state, which holds the tree.
	return goBuild(t, src, "./cmd/flux-deploy-notifier", true, "-buildvcs=false")
}

// TestRollingUpdate: replicas of an earlier release are replaced one by
// one by this one's while events are posted, through both mixed states: a
// replica of this release following a leader of the earlier one, then one
// of the earlier release following a leader of this one. Every replica
// shows every event acknowledged by any, they agree, and no mail goes
// twice.
func TestRollingUpdate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds earlier releases and runs them on a real PostgreSQL")
	}
	for _, commit := range releases {
		t.Run(commit[:7], func(t *testing.T) {
			old := buildRelease(t, commit)
			r := startReplicas(t, 0)
			events := crashEvents(3000, 10)
			acked := make([]bool, len(events))
			// post posts events[from:to] while during runs, once 100 are
			// acknowledged, then waits until every live replica shows
			// every event acknowledged so far.
			post := func(from, to int, during func()) {
				t.Helper()
				started := make(chan struct{})
				var once sync.Once
				done := make(chan []bool, 1)
				go func() {
					done <- r.postAll(events[from:to], func(n int64) {
						if n == 100 {
							once.Do(func() { close(started) })
						}
					})
				}()
				<-started
				during()
				copy(acked[from:to], <-done)
				r.converged(events[:to], acked[:to])
			}
			o1 := r.startBin(old)
			r.leader(20 * time.Second)
			var n1 *child
			post(0, 1000, func() {
				// This release following the earlier one's leader.
				n1 = r.start()
				r.ready(n1)
			})
			var o2 *child
			post(1000, 2000, func() {
				// The earlier leader goes: this release leads, and a
				// replica of the earlier one follows it.
				r.out(o1, true)
				stop(t, o1)
				if l := r.leader(20 * time.Second); l != n1 {
					t.Fatalf("%s leads, want the one replica left, %s", l.url, n1.url)
				}
				o2 = r.startBin(old)
				r.ready(o2)
			})
			post(2000, 3000, func() {
				n2 := r.start()
				r.ready(n2)
				r.out(o2, true)
				stop(t, o2)
			})
			r.leader(20 * time.Second)
			r.mailsOnce(events, 0)
		})
	}
}
