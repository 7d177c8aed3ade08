package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
)

// environmentsLine is GET /environments in a line per environment and
// one per pair: each cluster's state and running commit, and the commits
// between with the clusters that have not run them.
func environmentsLine(r *api.EnvironmentsResponse) string {
	var b strings.Builder
	short := func(c string) string { return c[:min(len(c), 4)] }
	for _, e := range r.Environments {
		fmt.Fprintf(&b, "%s:", e.Name)
		if e.Running != nil {
			fmt.Fprintf(&b, " all=%s", short(e.Running.Commit))
		}
		for _, c := range e.Clusters {
			fmt.Fprintf(&b, " %s=%s", c.Cluster, c.State)
			if c.Running != nil {
				fmt.Fprintf(&b, "/%s", short(c.Running.Commit))
			}
		}
		b.WriteString("\n")
	}
	for _, bt := range r.Between {
		fmt.Fprintf(&b, "%s>%s:", bt.Lower, bt.Higher)
		for _, p := range bt.Commits {
			fmt.Fprintf(&b, " %s(not on %s)", short(p.Commit), strings.Join(p.NotRunOn, ","))
		}
		b.WriteString("\n")
	}
	return b.String()
}

func getEnvironments(t *testing.T, url string) (*api.EnvironmentsResponse, int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body api.EnvironmentsResponse
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
	}
	return &body, resp.StatusCode
}

// TestEnvironments: GET /environments on both stores, --environments
// placing clusters known by events alone and one declared that never
// reported; a cluster in none its own environment, last, not compared; on
// PostgreSQL both replicas answer the same, and the survivor of the
// leader's death (SIGKILL) goes on answering, a new rollout with it.
func TestEnvironments(t *testing.T) {
	const declared = "staging=stg-eu,stg-us;prod=prod-eu,prod-us"
	a, b, c := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
	now := time.Now().UTC().Add(-time.Minute)
	var events []flux.Event
	deploy := func(cluster, hash string, sec int, platform string) {
		events = append(events, deployed(cluster, "main@sha1:"+hash, now.Add(time.Duration(sec)*time.Second), platform)...)
	}
	deploy("stg-eu", a, 0, "ReconciliationSucceeded")
	deploy("stg-us", a, 0, "ReconciliationSucceeded")
	deploy("prod-eu", a, 5, "ReconciliationSucceeded")
	deploy("stg-eu", b, 10, "ReconciliationSucceeded")
	deploy("stg-us", b, 10, "ReconciliationSucceeded")
	deploy("stg-eu", c, 20, "HealthCheckFailed")
	deploy("lab", c, 20, "ReconciliationSucceeded")
	const want = `staging: stg-eu=failed stg-us=running/bbbb
prod: prod-eu=running/aaaa prod-us=unreported
lab: all=cccc lab=running/cccc
staging>prod: cccc(not on prod-eu,prod-us) bbbb(not on prod-eu,prod-us)
`
	client := &http.Client{Timeout: 10 * time.Second}
	await := func(t *testing.T, url, want string) {
		t.Helper()
		var got string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			r, status := getEnvironments(t, url+"/environments")
			if got = environmentsLine(r); status == http.StatusOK && got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s/environments (%d):\n%s\nwant\n%s", url, status, got, want)
			}
		}
	}

	t.Run("bbolt", func(t *testing.T) {
		dir := t.TempDir()
		token := []byte("hmac-token")
		if err := os.WriteFile(filepath.Join(dir, "token"), token, 0o600); err != nil {
			t.Fatal(err)
		}
		url := startServe(t, nil, "--listen", "127.0.0.1:0", "--hmac-token-file", filepath.Join(dir, "token"), "--data-dir", dir,
			"--environments", declared)
		if err := postEvents(context.Background(), client, url, token, events); err != nil {
			t.Fatal(err)
		}
		await(t, url, want)
		// One source's rollouts alone: these came by events that name none.
		r, status := getEnvironments(t, url+"/environments?source=GitRepository/flux-system/flux-system")
		if got := environmentsLine(r); status != http.StatusOK || r.Source != "GitRepository/flux-system/flux-system" ||
			!strings.HasPrefix(got, "staging: stg-eu=unreported stg-us=unreported\n") {
			t.Errorf("one source (%d): %s", status, got)
		}
	})
	t.Run("postgres", func(t *testing.T) {
		r := startReplicas(t, 2, "--environments", declared)
		for _, c := range r.every() {
			r.ready(c)
		}
		if err := postEvents(context.Background(), client, r.every()[0].url, r.token, events); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.every() {
			await(t, c.url, want)
		}
		old := r.leader(40 * time.Second)
		_ = old.cmd.Process.Kill() // the PID this test started
		r.out(old, true)
		_ = old.cmd.Wait()
		survivor := r.leader(40 * time.Second)
		await(t, survivor.url, want)
		var more []flux.Event
		more = append(more, deployed("prod-us", "main@sha1:"+b, now.Add(30*time.Second), "ReconciliationSucceeded")...)
		if err := postEvents(context.Background(), client, survivor.url, r.token, more); err != nil {
			t.Fatal(err)
		}
		await(t, survivor.url, strings.Replace(strings.Replace(want, "prod-us=unreported", "prod-us=running/bbbb", 1),
			"bbbb(not on prod-eu,prod-us)", "bbbb(not on prod-eu)", 1))
	})
}
