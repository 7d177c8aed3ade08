package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/e2e"
)

// buildService builds the service's binary, as make e2e's tests do.
func buildService(t *testing.T) string {
	t.Helper()
	bin, err := e2e.BuildService(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestSmallFleet: a small fleet against the real binary prints a line a
// day, restarts the service, and finds every revision applied before and
// after the restart.
func TestSmallFleet(t *testing.T) {
	bin := buildService(t)
	var out bytes.Buffer
	// With a forge and every chat: every commit shown applied there too.
	err := run([]string{"-binary", bin, "-sources", "2", "-layers", "3", "-commits", "2", "-days", "2", "-samples", "20", "-github",
		"-chats", "slack,teams,webhook", "-dir", t.TempDir()}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		`github: 8 of 8 commits shown applied \(8 deployments, \d+ statuses\)`,
		`chats: 8 of 8 commits shown applied in each channel \(slack 8 messages, \d+ updates, 0 replies; teams 8 cards; webhook \d+ events\)`,
		`(?m)^ +1 +\d+ `, `(?m)^ +2 +\d+ `, `(?m)vrd p99 +hlz p99 +stolen +lst p99$`, `(?m)^ +1( +[\d.]+){10} +\d+% +[\d.]+$`,
		`restart: stopped in [\d.]+ s, ready in [\d.]+ s \(8 revisions checked after it, 0 not applied\)`,
		`max /verdict p99 [\d.]+ ms \(that day /healthz p99 [\d.]+ ms, CPU stolen \d+%\), 0 events refused, 0 of 8 verdicts not applied`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("no %q in the output:\n%s", want, out.String())
		}
	}
}

// TestInterruptedFleetCleansUp: an interrupted run stops its service and
// removes its work directory (and its cgroup, by the same defers) instead
// of leaving a service running into the next run.
func TestInterruptedFleetCleansUp(t *testing.T) {
	bin := buildService(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where the run makes its work directory
	errc := make(chan error, 1)
	go func() {
		errc <- run([]string{"-binary", bin, "-sources", "2", "-layers", "3", "-days", "100000", "-samples", "20"}, io.Discard)
	}()
	// The service's database exists once it started, after the run's
	// signal handler was in place: a SIGINT then goes to the handler, not
	// to the default action, which would end the test binary.
	deadline := time.Now().Add(time.Minute)
	for {
		if m, _ := filepath.Glob(filepath.Join(tmp, "fdn-fleet-*", "data", "state.db")); len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the service did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, errInterrupted) {
			t.Fatalf("run returned %v, want %v", err, errInterrupted)
		}
	case <-time.After(time.Minute):
		t.Fatal("the interrupted run did not return")
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Fatalf("left behind in %s: %v", tmp, left)
	}
}
