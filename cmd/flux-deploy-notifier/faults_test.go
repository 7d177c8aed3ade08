package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/loadkit"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
)

// post sends one event to the child and returns the status (0 when the
// request failed: refused, reset).
func post(client *http.Client, url string, token []byte, e crashEvent) int {
	status, _ := loadkit.Post(client, url+"/webhook", loadkit.Event{Body: e.body, Sig: signature.Sign(token, e.body)})
	return status
}

func readyz(t *testing.T, url string) (int, []string) {
	t.Helper()
	status, warnings, err := loadkit.Readyz(http.DefaultClient, url)
	if err != nil {
		t.Fatal(err)
	}
	return status, warnings
}

// awaitReadyz polls /readyz until ok accepts its answer, which it returns,
// and fails the test after 20 s without: what names what was awaited.
func awaitReadyz(t *testing.T, url, what string, ok func(status int, warnings []string) bool) (int, []string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		status, warnings := readyz(t, url)
		if ok(status, warnings) {
			return status, warnings
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never showed %s: %d %q", what, status, warnings)
		}
	}
}

func metric(t *testing.T, url, name string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// TestDiskFull fills the filesystem under the data dir (a real tmpfs): while
// it is full every event is answered 503 and none is acknowledged, the log
// says so once, /readyz warns while staying ready, a metric counts the
// failures; when space returns the service recovers without a restart, says
// so once, and after a restart every acknowledged event is there.
func TestDiskFull(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a filesystem and runs the real binary")
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs as root)")
	}
	mnt := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount a tmpfs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount: %v\n%s", err, out)
		}
	})
	bin := buildBinary(t, true)
	token := []byte("disk-token")
	args := serviceArgs(t, mnt, token)
	c := startChild(t, bin, args...)
	client := &http.Client{Timeout: 10 * time.Second}
	events := crashEvents(8000, 10)
	acked := make([]bool, len(events))
	for i := range 300 {
		if post(client, c.url, token, events[i]) != http.StatusAccepted {
			t.Fatalf("event %d refused before the disk filled", i)
		}
		acked[i] = true
	}

	// Fill what is left.
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	// Commits still fit in what the files own (the log is preallocated)
	// until one needs a new block: from then on, every event is refused.
	refused, inARow, i := 0, 0, 300
	for ; inARow < 200; i++ {
		if i == len(events)-100 {
			t.Fatalf("%d events refused of %d on a full disk, not 200 in a row", refused, i-300)
		}
		switch post(client, c.url, token, events[i]) {
		case http.StatusAccepted:
			acked[i], inARow = true, 0
		case http.StatusServiceUnavailable:
			refused++
			inARow++
		default:
			t.Fatalf("event %d: neither stored nor 503", i)
		}
	}
	t.Logf("full: %d events stored in space the files owned, then %d refused", i-300-refused, refused)
	events = events[:i+100]
	if status, warnings := readyz(t, c.url); status != http.StatusOK || len(warnings) != 1 || !strings.Contains(warnings[0], "storing fails since") ||
		!strings.Contains(warnings[0], "no space left on device") {
		t.Fatalf("/readyz while full: %d %q", status, warnings)
	}
	if n := metric(t, c.url, "fdn_store_commit_failures_total"); n == "" || n == "0" {
		t.Fatalf("fdn_store_commit_failures_total %q while full", n)
	}
	if at := metric(t, c.url, "fdn_store_last_commit_failure_timestamp_seconds"); at == "" || at == "0" {
		t.Fatalf("no time of the last failure: %q", at)
	}

	// Space returns: the refused events, retried as Flux does, and new ones
	// are stored without a restart.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := 300; i < len(events); i++ {
		if acked[i] {
			continue
		}
		if status := post(client, c.url, token, events[i]); status != http.StatusAccepted {
			t.Fatalf("event %d after space returned: %d", i, status)
		}
		acked[i] = true
	}
	if status, warnings := readyz(t, c.url); status != http.StatusOK || len(warnings) != 0 {
		t.Fatalf("/readyz after recovery: %d %q", status, warnings)
	}
	logs := c.logs.String()
	if n := strings.Count(logs, "store commits failing"); n != 1 {
		t.Errorf("the failing store logged %d times, want once:\n%s", n, tail(logs, 20))
	}
	if n := strings.Count(logs, "store commits succeed again"); n != 1 || !strings.Contains(logs, "failed_commits=") {
		t.Errorf("the recovery logged %d times, want once with the count:\n%s", n, tail(logs, 20))
	}
	if n := strings.Count(logs, "level=ERROR"); n > 1 {
		t.Errorf("%d error lines for one episode:\n%s", n, tail(logs, 20))
	}

	stop(t, c)
	again := startChild(t, bin, args...)
	if missing := verifyReflected(t, again.url, events, func(i int) bool { return acked[i] }); len(missing) > 0 {
		t.Fatalf("%d acknowledged events lost, e.g. %s on %s", len(missing), events[missing[0]].hash, events[missing[0]].layer)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func stop(t *testing.T, c *child) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, tail(c.logs.String(), 20))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// TestSIGTERMUnderLoad: SIGTERM while 24 senders post and a pipeline
// long-polls. Every request is answered 202 (stored) or fails (refused,
// reset, 503), the long poll answers at once, the process exits 0 within
// 10 s, and after a restart every 202 is there.
func TestSIGTERMUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the real binary")
	}
	bin := buildBinary(t, true)
	dir := t.TempDir()
	token := []byte("term-token")
	args := serviceArgs(t, dir, token)
	c := startChild(t, bin, args...)

	// A pipeline's long poll for a commit that never comes.
	polled := make(chan time.Time, 1)
	go func() {
		resp, err := http.Get(c.url + "/verdict?rev=" + strings.Repeat("ab", 20) + "&wait=5m")
		if err == nil {
			resp.Body.Close()
		}
		polled <- time.Now()
	}()

	events := crashEvents(4000, 10)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	acked := make([]atomic.Bool, len(events))
	var nAcked atomic.Int64
	var other atomic.Int64 // answers that are neither 202 nor an error
	var once sync.Once
	var termAt time.Time
	exited := make(chan error, 1)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			for i := range work {
				switch status := post(client, c.url, token, events[i]); status {
				case http.StatusAccepted:
					acked[i].Store(true)
					if nAcked.Add(1) == int64(len(events)/3) {
						once.Do(func() {
							termAt = time.Now()
							_ = c.cmd.Process.Signal(syscall.SIGTERM)
							go func() { exited <- c.cmd.Wait() }()
						})
					}
				case 0, http.StatusServiceUnavailable:
				default:
					other.Add(1)
				}
			}
		})
	}
	for i := range events {
		work <- i
	}
	close(work)
	wg.Wait()
	var err error
	select {
	case err = <-exited:
	case <-time.After(time.Minute):
		t.Fatal("SIGTERM was never sent, or the process never exited")
	}
	took := time.Since(termAt)
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, tail(c.logs.String(), 20))
	}
	if took > 10*time.Second {
		t.Fatalf("exited %s after SIGTERM, want within 10 s", took)
	}
	if n := other.Load(); n > 0 {
		t.Fatalf("%d requests answered neither 202 nor an error", n)
	}
	if at := <-polled; at.Sub(termAt) > 6*time.Second {
		t.Fatalf("the long poll held on %s after SIGTERM", at.Sub(termAt))
	}
	got := nAcked.Load()
	if got == int64(len(events)) {
		t.Fatal("every event acknowledged: SIGTERM did not land mid-stream")
	}
	t.Logf("%d of %d events acknowledged; exited %s after SIGTERM", got, len(events), took.Round(time.Millisecond))

	again := startChild(t, bin, args...)
	if missing := verifyReflected(t, again.url, events, func(i int) bool { return acked[i].Load() }); len(missing) > 0 {
		t.Fatalf("%d acknowledged events lost, e.g. %s on %s", len(missing), events[missing[0]].hash, events[missing[0]].layer)
	}
}

// TestStuckMailWarns: with the SMTP server unreachable, a mail older than
// --mail-alert-after shows as a /readyz warning (readiness holds) and in
// fdn_mails_stuck.
func TestStuckMailWarns(t *testing.T) {
	dir := t.TempDir()
	token := []byte("hmac-token")
	if err := os.WriteFile(filepath.Join(dir, "token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	url := startServe(t, nil, "--listen", "127.0.0.1:0", "--data-dir", dir, "--hmac-token-file", filepath.Join(dir, "token"),
		"--smtp-addr", "127.0.0.1:1", "--smtp-tls", "none", "--mail-to", "ops@example.com", "--mail-alert-after", "1s")
	// "listening" is printed before the engine runs: readiness follows.
	if _, warnings := awaitReadyz(t, url, "readiness", func(status int, _ []string) bool { return status == http.StatusOK }); len(warnings) != 0 {
		t.Fatalf("/readyz before any mail: %q", warnings)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	if err := postEvents(context.Background(), client, url, token, sampleEvents("clean", "dev", time.Now().UTC().Add(-time.Minute))); err != nil {
		t.Fatal(err)
	}
	awaitReadyz(t, url, "a stuck-mail warning", func(status int, warnings []string) bool {
		return status == http.StatusOK && len(warnings) == 1 && strings.Contains(warnings[0], "mails undelivered for longer than 1s") &&
			strings.Contains(warnings[0], "connection refused")
	})
	if n := metric(t, url, "fdn_mails_stuck"); n == "" || n == "0" {
		t.Fatalf("fdn_mails_stuck %q", n)
	}
}
