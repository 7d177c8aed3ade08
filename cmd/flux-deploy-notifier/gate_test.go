package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ancestry/gittest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/wait"
)

// TestPromotionGate: wait --promote-from over real histories, an
// environment each: soak met (counted from the service's applied times,
// so a pipeline started late passes at once), soak not reached (2), a
// failure in the lower environment (1), a newer rollout failing within
// the soak (1), a skipped commit gated by the rollout it went out in;
// --environment waits on an environment's clusters; bad usage is 3.
func TestPromotionGate(t *testing.T) {
	long := time.Now().UTC().Add(-2 * time.Hour)
	origin := gittest.New(t)
	x := origin.CommitAt("x: deployed inside y", long.Add(-10*time.Minute))
	checkout := origin.Clone(1)
	y := origin.CommitAt("y", long.Add(-9*time.Minute))
	dir := t.TempDir()
	token := []byte("hmac-token")
	if err := os.WriteFile(filepath.Join(dir, "token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	url := startServe(t, nil, "--listen", "127.0.0.1:0", "--data-dir", dir, "--hmac-token-file", filepath.Join(dir, "token"),
		"--environments", "soaked=s1,s2;fresh=f1;failing=x1,x2;flaky=k1;skipping=g1;prod=p1,p2")
	hash := func(c byte) string { return strings.Repeat(string(c), 40) }
	var events []flux.Event
	deploy := func(cluster, h string, at time.Time, platform string) {
		events = append(events, deployed(cluster, "main@sha1:"+h, at, platform)...)
	}
	deploy("s1", hash('a'), long, "ReconciliationSucceeded")
	deploy("s2", hash('a'), long.Add(time.Minute), "ReconciliationSucceeded")
	deploy("f1", hash('b'), time.Now().UTC().Add(-time.Minute), "ReconciliationSucceeded")
	deploy("x1", hash('c'), long, "ReconciliationSucceeded")
	deploy("x2", hash('c'), long, "HealthCheckFailed")
	deploy("k1", hash('d'), long, "ReconciliationSucceeded")
	deploy("k1", hash('e'), long.Add(10*time.Minute), "HealthCheckFailed")
	deploy("g1", y, long, "ReconciliationSucceeded")
	deploy("p1", hash('a'), long, "ReconciliationSucceeded")
	deploy("p2", hash('a'), long, "ReconciliationSucceeded")
	if err := postEvents(context.Background(), &http.Client{Timeout: 10 * time.Second}, url, token, events); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PATH": os.Getenv("PATH")}
	for _, tt := range []struct {
		name  string
		args  []string
		exit  int
		says  []string
		never []string
	}{
		{"soak met long ago: passes at once", []string{hash('a'), "--promote-from", "soaked", "--soak", "30m"}, 0,
			[]string{"== s1\n", "== s2\n", "soak of 30m0s met on s1: applied " + long.Add(time.Second).Format(time.RFC3339)}, nil},
		{"soak not reached", []string{hash('b'), "--promote-from", "fresh", "--soak", "1h", "--timeout", "2s"}, 2,
			[]string{"soak of 1h0m0s on f1 not over: it ends at", "timed out"}, []string{"soak failed"}},
		{"failed in the lower environment", []string{"--rev", hash('c'), "--promote-from", "failing", "--soak", "1m"}, 1,
			[]string{"on x2: failed", "failure: flux-system/platform HealthCheckFailed"}, []string{"soak failed on x2"}},
		{"a newer rollout failed within the soak", []string{hash('d'), "--promote-from", "flaky", "--soak", "30m"}, 1,
			[]string{"soak failed on k1: a newer rollout, eeeeeee, failed at"}, nil},
		{"the same outside a 5 minute soak", []string{hash('d'), "--promote-from", "flaky", "--soak", "5m"}, 0,
			[]string{"soak of 5m0s met on k1"}, nil},
		{"a skipped commit: the rollout it went out in is gated", []string{x, "--promote-from", "skipping", "--soak", "30m", "--git-dir", checkout}, 0,
			[]string{"it went out in " + flux.Short(y), "soak of 30m0s met on g1"}, nil},
		{"--environment waits on its clusters", []string{hash('a'), "--environment", "prod"}, 0,
			[]string{"== p1\n", "== p2\n"}, []string{"soak"}},
		{"an environment unknown", []string{hash('a'), "--promote-from", "staging"}, 3,
			[]string{"no environment staging (the service knows failing, flaky, fresh, prod, skipping, soaked)"}, nil},
		{"two ways to name clusters", []string{hash('a'), "--promote-from", "soaked", "--cluster", "s1"}, 3,
			[]string{"give one"}, nil},
		{"--soak without --promote-from", []string{hash('a'), "--soak", "1m"}, 3, []string{"with --promote-from"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			args := append([]string{"wait"}, tt.args...)
			args = append(args, "--url", url)
			if !strings.Contains(strings.Join(args, " "), "--timeout") {
				args = append(args, "--timeout", "20s")
			}
			err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &out)
			if exitOf(err) != tt.exit {
				t.Fatalf("exit %d (%v), want %d\n%s", exitOf(err), err, tt.exit, out.String())
			}
			for _, s := range tt.says {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
			for _, s := range tt.never {
				if strings.Contains(out.String(), s) {
					t.Errorf("output has %q:\n%s", s, out.String())
				}
			}
		})
	}

	// The JSON a pipeline reads: each cluster's soak.
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"wait", hash('d'), "--url", url, "--promote-from", "flaky", "--soak", "30m", "--output", "json", "--timeout", "20s"},
		func(k string) string { return env[k] }, &stdout, &stderr)
	var res wait.Result
	if exitOf(err) != 1 || json.Unmarshal(stdout.Bytes(), &res) != nil || len(res.Clusters) != 1 || res.Clusters[0].Outcome != "soak-failed" ||
		!strings.Contains(res.Clusters[0].SoakFailure, "eeeeeee") || res.Clusters[0].SoakEnds == nil {
		t.Errorf("JSON (exit %d): %s\n%s", exitOf(err), stdout.String(), stderr.String())
	}
}
