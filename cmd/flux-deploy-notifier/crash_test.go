package main

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
)

// child is the real binary running as a separate process.
type child struct {
	cmd  *exec.Cmd
	url  string
	logs *syncbuf.Buffer // its stderr
}

// buildBinary builds the service; with verify (-tags fdn_verify), its
// engine checks every view against a full evaluation after every batch,
// as the tests want and a benchmark must not.
func buildBinary(t testing.TB, verify bool) string {
	t.Helper()
	return goBuild(t, ".", ".", verify)
}

// goBuild builds the service's package pkg in dir (an earlier release's
// tree: buildRelease) into a temporary file, with -tags fdn_verify when
// verify.
func goBuild(t testing.TB, dir, pkg string, verify bool, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flux-deploy-notifier")
	tags := ""
	if verify {
		tags = "fdn_verify"
	}
	build := exec.Command("go", append(append([]string{"build"}, flags...), "-tags", tags, "-o", bin, pkg)...)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build in %s: %v\n%s", dir, err, out)
	}
	return bin
}

// serviceArgs writes token to a file of its own and returns the flags of
// a service on dataDir that authenticates with it and keeps every rollout
// a test makes: none turns stuck or expires by the wall clock, whatever
// the times of its events.
func serviceArgs(t *testing.T, dataDir string, token []byte) []string {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, token, 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--data-dir", dataDir, "--hmac-token-file", tokenFile, "--stuck-after", "8760h", "--retention", "87600h"}
}

func startChild(t *testing.T, bin string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "text"}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, logs: &syncbuf.Buffer{}}
	cmd.Stderr = c.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Only the process this test started, by its PID.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c.url = readListening(t, stdout)
	return c
}

type crashEvent struct {
	layer, hash string
	body        []byte
}

// crashEvents are n distinct success events: revision i reaches layer j.
func crashEvents(n, layers int) []crashEvent {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	out := make([]crashEvent, 0, n)
	for i := 0; len(out) < n; i++ {
		sum := sha1.Sum(fmt.Appendf(nil, "crash-%d", i))
		hash := hex.EncodeToString(sum[:])
		for j := 0; j < layers && len(out) < n; j++ {
			layer := fmt.Sprintf("layer-%02d", j)
			body, _ := json.Marshal(map[string]any{
				"involvedObject": map[string]string{"kind": "Kustomization", "namespace": "flux-system", "name": layer},
				"severity":       "info",
				"timestamp":      t0.Add(time.Duration(i) * time.Minute).Format(time.RFC3339),
				"message":        "Reconciliation finished in 312ms, next run in 10m0s",
				"reason":         "ReconciliationSucceeded",
				"metadata":       map[string]string{"revision": "main@sha1:" + hash, "commit_status": "update"},
			})
			out = append(out, crashEvent{layer: "flux-system/" + layer, hash: hash, body: body})
		}
	}
	return out
}

// TestAcknowledgedEventsSurviveSIGKILL posts 2,000 events concurrently to the
// real binary, kills it with SIGKILL mid-stream, restarts it on the same
// data, and proves every event that got a 202 is reflected.
func TestAcknowledgedEventsSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	bin := buildBinary(t, true)
	dir := t.TempDir()
	token := []byte("crash-token")
	args := serviceArgs(t, dir, token)
	first := startChild(t, bin, args...)
	// The binary the tests build verifies every evaluation.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(first.logs.String(), "verify_evaluation=true"); {
		if time.Now().After(deadline) {
			t.Fatalf("the fdn_verify build does not say it verifies:\n%s", first.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	events := crashEvents(2000, 10)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	acked := make([]atomic.Bool, len(events))
	var nAcked atomic.Int64
	var once sync.Once
	killAt := int64(len(events) / 3)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			for i := range work {
				req, _ := http.NewRequest(http.MethodPost, first.url+"/webhook", bytes.NewReader(events[i].body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Signature", signature.Sign(token, events[i].body))
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					acked[i].Store(true)
					if nAcked.Add(1) == killAt {
						once.Do(func() { _ = first.cmd.Process.Kill() })
					}
				}
			}
		})
	}
	for i := range events {
		work <- i
	}
	close(work)
	wg.Wait()
	_ = first.cmd.Wait()
	got := nAcked.Load()
	if got < killAt || got == int64(len(events)) {
		t.Fatalf("%d of %d events acknowledged: the kill did not land mid-stream", got, len(events))
	}
	t.Logf("%d of %d events acknowledged before SIGKILL", got, len(events))

	second := startChild(t, bin, args...)
	missing := verifyReflected(t, second.url, events, func(i int) bool { return acked[i].Load() })
	if len(missing) > 0 {
		t.Fatalf("%d acknowledged events lost, e.g. %s on %s", len(missing), events[missing[0]].hash, events[missing[0]].layer)
	}
}

// verifyReflected returns the indexes of wanted events whose layer does not
// show the revision as applied.
func verifyReflected(t *testing.T, url string, events []crashEvent, want func(int) bool) []int {
	t.Helper()
	byHash := map[string][]int{}
	for i, e := range events {
		if want(i) {
			byHash[e.hash] = append(byHash[e.hash], i)
		}
	}
	var missing []int
	for hash, idx := range byHash {
		resp, err := http.Get(url + "/verdict?rev=" + hash)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Layers []struct{ Name, State string } `json:"layers"`
		}
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		applied := map[string]bool{}
		for _, l := range v.Layers {
			applied[l.Name] = l.State == "applied"
		}
		for _, i := range idx {
			if !applied[events[i].layer] {
				missing = append(missing, i)
			}
		}
	}
	return missing
}
