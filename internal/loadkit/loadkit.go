// Package loadkit is what the programs and tests that drive the real
// service over HTTP share: the load generator, the fleet tool and the
// tests of several replicas. It posts events signed as
// notification-controller signs them and asks /verdict what a layer did,
// so that each says it once.
package loadkit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
)

// Main runs a program's run with its arguments and standard output, and
// exits 1 naming the program when it fails.
func Main(name string, run func(args []string, out io.Writer) error) {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Event is an event's body and its signature, made once: a run posts
// them many times, and signing is not what it measures.
type Event struct {
	Body []byte
	Sig  string
}

// Signed is e as notification-controller posts it, signed with token.
func Signed(token []byte, e flux.Event) Event {
	body, err := json.Marshal(e)
	if err != nil {
		panic(err) // flux.Event always marshals
	}
	return Event{Body: body, Sig: signature.Sign(token, body)}
}

// Post posts ev to url (the webhook's) and returns the status; the
// answer's body is read to its end, so that the connection is reused.
func Post(client *http.Client, url string, ev Event) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(ev.Body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(signature.Header, ev.Sig)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// LayerApplied reports whether base's /verdict shows layer applied in the
// rollout of hash; false when it cannot tell (no answer, no such layer).
func LayerApplied(client *http.Client, base, hash, layer string) bool {
	return LayersApplied(client, base, "", hash, layer)
}

// LayersApplied reports whether /verdict at base shows every one of
// layers applied in hash's rollout on cluster ("" the default one).
func LayersApplied(client *http.Client, base, cluster, hash string, layers ...string) bool {
	q := url.Values{"rev": {hash}}
	if cluster != "" {
		q.Set("cluster", cluster)
	}
	resp, err := client.Get(base + "/verdict?" + q.Encode())
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var v struct {
		Layers []struct{ Name, State string } `json:"layers"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return false
	}
	applied := map[string]bool{}
	for _, l := range v.Layers {
		applied[l.Name] = l.State == "applied"
	}
	for _, l := range layers {
		if !applied[l] {
			return false
		}
	}
	return true
}

// Readyz is the service's /readyz at base: its status and its warnings.
func Readyz(client *http.Client, base string) (int, []string, error) {
	resp, err := client.Get(base + "/readyz")
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Warnings []string `json:"warnings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, nil, fmt.Errorf("/readyz: %w", err)
	}
	return resp.StatusCode, body.Warnings, nil
}

// Start starts cmd, the service's serve listening on a port of its
// choosing, and returns the URL it says it listens on, and stop: SIGTERM
// to the process it started (the only one it ever signals), SIGKILL after
// grace; stop may be called more than once, from any goroutine. started,
// when not nil, runs once the process exists (a memory cgroup to join).
func Start(cmd *exec.Cmd, grace time.Duration, started func(pid int) error) (url string, stop func(), err error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = sync.OnceFunc(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	if started != nil {
		if err := started(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			<-done
			return "", nil, err
		}
	}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, url, ok := strings.Cut(sc.Text(), "listening on "); ok {
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return url, stop, nil
		}
	}
	stop()
	return "", nil, errors.New("the service exited before it listened")
}

// AwaitReady waits until url's /readyz answers 200, for at most within.
func AwaitReady(client *http.Client, url string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if resp, err := client.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready within %s", within)
}
