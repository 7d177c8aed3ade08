package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/wait"
)

// TestWait is the pipeline gate: exit 0 on applied, 1 on failed naming the
// layer, reason and objects, 2 on timeout, 3 on trouble, and the verdict
// token guards /verdict.
func TestWait(t *testing.T) {
	dir := t.TempDir()
	token := []byte("hmac-token")
	verdictToken := filepath.Join(dir, "verdict-token")
	if err := os.WriteFile(filepath.Join(dir, "token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(verdictToken, []byte("read-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := startServe(t, nil, "--listen", "127.0.0.1:0", "--data-dir", dir, "--hmac-token-file", filepath.Join(dir, "token"),
		"--verdict-token-file", verdictToken)
	client := &http.Client{Timeout: 10 * time.Second}
	now := time.Now().UTC().Add(-20 * time.Second)
	clean, pruned := sampleEvents("clean", "dev", now), sampleEvents("prune-failed", "dev", now.Add(time.Minute))
	helm := sampleEvents("helm-failed", "dev", now.Add(2*time.Minute))
	if err := postEvents(context.Background(), client, url, token, clean); err != nil {
		t.Fatal(err)
	}
	if err := postEvents(context.Background(), client, url, token, helm); err != nil {
		t.Fatal(err)
	}
	if err := postEvents(context.Background(), client, url, token, pruned); err != nil {
		t.Fatal(err)
	}
	hash := func(rev string) string { return rev[strings.LastIndexByte(rev, ':')+1:] }

	if resp, err := http.Get(url + "/verdict?rev=" + hash(clean[0].Metadata["revision"])); err != nil || resp.StatusCode != 401 {
		t.Fatalf("verdict without the token: %v %v", resp, err)
	}

	waitFor := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"wait", "--url", url}, args...), func(string) string { return "" }, &out, &out)
		return out.String(), err
	}
	code := func(err error) int {
		var c exitCode
		if err == nil {
			return 0
		}
		if errors.As(err, &c) {
			return int(c)
		}
		return -1
	}
	tests := []struct {
		name string
		args []string
		want int
		says []string
	}{
		{"applied", []string{"--rev", hash(clean[0].Metadata["revision"])[:10], "--token-file", verdictToken}, 0,
			[]string{": applied", "flux-system/apps", "applied"}},
		{"prune failed", []string{"--rev", pruned[0].Metadata["revision"], "--token-file", verdictToken}, 1,
			[]string{": failed", "failure: flux-system/apps PruneFailed", "ConfigMap apps/old-config: configmaps \"old-config\" is forbidden"}},
		{"a release failed", []string{"--rev", helm[0].Metadata["revision"], "--token-file", verdictToken}, 1,
			[]string{": failed (flux-system/apps failed: HelmRelease/apps/web UpgradeFailed)", "failure: flux-system/apps HelmRelease/apps/web UpgradeFailed",
				"Helm upgrade failed for release apps/web", "then: rolled back to v4: the cluster runs the previous release"}},
		{"never seen: timeout", []string{"--rev", strings.Repeat("ab", 20), "--token-file", verdictToken, "--timeout", "1s"}, 2,
			[]string{"unknown", "timed out"}},
		{"no token", []string{"--rev", hash(clean[0].Metadata["revision"])}, 3, []string{"verdict token"}},
		{"bad revision", []string{"--rev", "nope", "--token-file", verdictToken}, 3, []string{"--rev"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := waitFor(tt.args...)
			if code(err) != tt.want {
				t.Fatalf("exit %d (%v), want %d\n%s", code(err), err, tt.want, out)
			}
			for _, s := range tt.says {
				if !strings.Contains(out, s) {
					t.Fatalf("output lacks %q:\n%s", s, out)
				}
			}
		})
	}
	t.Run("superseded, and followed", func(t *testing.T) {
		a, b := "main@sha1:"+strings.Repeat("a1", 20), "main@sha1:"+strings.Repeat("b2", 20)
		ev := func(layer, rev, reason string, sec int) flux.Event {
			return flux.Event{
				InvolvedObject: flux.ObjectRef{Kind: "Kustomization", Namespace: "flux-system", Name: layer},
				Severity:       "info", Timestamp: now.Add(time.Duration(sec) * time.Second).Format(time.RFC3339),
				Reason: reason, Message: reason, Metadata: map[string]string{"revision": rev, "cluster": "dev"},
			}
		}
		events := []flux.Event{
			ev("infra", a, "ReconciliationSucceeded", 200), ev("platform", a, "Progressing", 201),
			ev("platform", a, "HealthCheckCanceled", 205),
			ev("infra", b, "ReconciliationSucceeded", 206), ev("platform", b, "ReconciliationSucceeded", 210),
			// apps, at the samples' revision, must move too (events alone
			// expect every layer at an older revision of the source).
			ev("apps", b, "ReconciliationSucceeded", 212),
		}
		if err := postEvents(context.Background(), client, url, token, events); err != nil {
			t.Fatal(err)
		}
		out, err := waitFor("--rev", a, "--token-file", verdictToken, "--cluster", "dev")
		if code(err) != 1 || !strings.Contains(out, ": superseded") {
			t.Fatalf("exit %d:\n%s", code(err), out)
		}
		out, err = waitFor("--rev", a, "--token-file", verdictToken, "--cluster", "dev", "--follow-superseded")
		if code(err) != 0 || !strings.Contains(out, "following it") || !strings.Contains(out, b+" on dev: applied") {
			t.Fatalf("exit %d:\n%s", code(err), out)
		}
	})

	t.Run("several clusters", func(t *testing.T) {
		c := "main@sha1:" + strings.Repeat("c3", 20)
		ev := func(cluster, layer, reason, severity string, sec int) flux.Event {
			return flux.Event{
				InvolvedObject: flux.ObjectRef{Kind: "Kustomization", Namespace: "flux-system", Name: layer},
				Severity:       severity, Timestamp: now.Add(time.Duration(sec) * time.Second).Format(time.RFC3339),
				Reason: reason, Message: reason, Metadata: map[string]string{"revision": c, "cluster": cluster},
			}
		}
		events := []flux.Event{
			ev("staging", "infra", "ReconciliationSucceeded", "info", 300), ev("staging", "platform", "ReconciliationSucceeded", "info", 310),
			ev("prod", "infra", "ReconciliationSucceeded", "info", 320), ev("prod", "platform", "HealthCheckFailed", "error", 330),
		}
		if err := postEvents(context.Background(), client, url, token, events); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			clusters string
			want     int
			says     []string
		}{
			{"staging", 0, []string{c + " on staging: applied"}},
			{"staging,prod", 1, []string{"== staging\n" + c + " on staging: applied", "== prod\n" + c + " on prod: failed", "failure: flux-system/platform HealthCheckFailed"}},
			{"prod,nowhere", 1, []string{"== prod\n" + c + " on prod: failed", "== nowhere\n"}}, // a failure outranks a timeout
			{"staging, nowhere", 2, []string{"== staging\n" + c + " on staging: applied", "== nowhere\n", "unknown", "timed out"}},
		} {
			out, err := waitFor("--rev", c, "--token-file", verdictToken, "--cluster", tt.clusters, "--timeout", "2s")
			if code(err) != tt.want {
				t.Fatalf("--cluster %s: exit %d, want %d\n%s", tt.clusters, code(err), tt.want, out)
			}
			for _, s := range tt.says {
				if !strings.Contains(out, s) {
					t.Fatalf("--cluster %s: output lacks %q:\n%s", tt.clusters, s, out)
				}
			}
		}
		if out, err := waitFor("--rev", c, "--token-file", verdictToken, "--cluster", "staging,"); code(err) != 3 {
			t.Fatalf("an empty cluster in the list: exit %d\n%s", code(err), out)
		}

		// In GitHub Actions: annotations and a step summary; in GitLab CI:
		// a collapsible section per cluster.
		summary := filepath.Join(t.TempDir(), "summary.md")
		ciRun := func(env map[string]string) (string, error) {
			var out bytes.Buffer
			err := run(context.Background(), []string{"wait", "--url", url, "--rev", c, "--token-file", verdictToken,
				"--cluster", "staging,prod", "--external-url", "https://fdn.example.com/"}, func(k string) string { return env[k] }, &out, &out)
			return out.String(), err
		}
		out, err := ciRun(map[string]string{"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary})
		if code(err) != 1 || !strings.Contains(out, "::error title=prod%3A flux-system/platform HealthCheckFailed::HealthCheckFailed") ||
			strings.Contains(out, "::error title=staging") {
			t.Fatalf("GitHub annotations: exit %d\n%s", code(err), out)
		}
		md, err := os.ReadFile(summary)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"### Deploy of `" + c + "`", "| staging | [applied](https://fdn.example.com/ui/staging/" + hash(c) + ") |",
			"| prod | [failed](https://fdn.example.com/ui/prod/" + hash(c) + ") |", "#### prod", "| flux-system/platform | failed | HealthCheckFailed |"} {
			if !strings.Contains(string(md), want) {
				t.Errorf("step summary lacks %q:\n%s", want, md)
			}
		}
		out, err = ciRun(map[string]string{"GITLAB_CI": "true"})
		if code(err) != 1 || !strings.Contains(out, "section_start:") || !strings.Contains(out, ":fdn_staging[collapsed=true]\r\x1b[0Kstaging: applied") ||
			!strings.Contains(out, ":fdn_prod[collapsed=false]\r\x1b[0Kprod: failed") || strings.Count(out, "section_end:") != 2 {
			t.Fatalf("GitLab sections: exit %d\n%q", code(err), out)
		}
	})

	t.Run("a line per change, and JSON", func(t *testing.T) {
		d := "main@sha1:" + strings.Repeat("d4", 20)
		ev := func(layer, reason string, sec int) flux.Event {
			return flux.Event{
				InvolvedObject: flux.ObjectRef{Kind: "Kustomization", Namespace: "flux-system", Name: layer},
				Severity:       "info", Timestamp: now.Add(time.Duration(sec) * time.Second).Format(time.RFC3339),
				Reason: reason, Message: reason, Metadata: map[string]string{"revision": d, "cluster": "qa"},
			}
		}
		if err := postEvents(context.Background(), client, url, token, []flux.Event{ev("infra", "Progressing", 400), ev("platform", "DependencyNotReady", 401)}); err != nil {
			t.Fatal(err)
		}
		var out syncbuf.Buffer
		done := make(chan error, 1)
		go func() {
			done <- run(context.Background(), []string{"wait", "--url", url, "--rev", d, "--token-file", verdictToken, "--timeout", "60s"},
				func(string) string { return "" }, &out, &out)
		}()
		// Once the gate has seen the rollout applying, the layers finish.
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "applying"); {
			if time.Now().After(deadline) {
				t.Fatalf("the gate never reported the rollout applying:\n%s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err := postEvents(context.Background(), client, url, token, []flux.Event{ev("infra", "ReconciliationSucceeded", 402), ev("platform", "ReconciliationSucceeded", 403)}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; code(err) != 0 {
			t.Fatalf("exit %d\n%s", code(err), out.String())
		}
		for _, line := range []string{"d4d4d4d on qa: applying -> applied", "d4d4d4d on qa: flux-system/infra progressing -> applied (ReconciliationSucceeded)",
			"d4d4d4d on qa: flux-system/platform waiting -> applied (ReconciliationSucceeded)"} {
			if n := strings.Count(out.String(), line); n != 1 {
				t.Errorf("%q printed %d times, want once:\n%s", line, n, out.String())
			}
		}

		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"wait", "--url", url, "--rev", d, "--token-file", verdictToken, "--cluster", "qa,nowhere", "--timeout", "1s", "--output", "json"},
			func(string) string { return "" }, &stdout, &stderr)
		var res wait.Result
		if jerr := json.Unmarshal(stdout.Bytes(), &res); jerr != nil {
			t.Fatalf("stdout is not JSON (%v):\n%s", jerr, stdout.String())
		}
		if code(err) != 2 || res.Exit != 2 || len(res.Clusters) != 2 || res.Clusters[0].Outcome != "applied" || res.Clusters[0].Verdict == nil ||
			res.Clusters[0].Verdict.Layers.Len() != 2 || res.Clusters[1].Outcome != "unknown" || res.Clusters[1].Verdict != nil {
			t.Fatalf("exit %d, result %+v", code(err), res)
		}
		if !strings.Contains(stderr.String(), "== qa") {
			t.Fatalf("the human blocks are not on stderr:\n%s", stderr.String())
		}
	})

	t.Run("service unreachable", func(t *testing.T) {
		var out bytes.Buffer
		err := run(context.Background(), []string{"wait", "--url", "http://127.0.0.1:1", "--rev", strings.Repeat("ab", 20), "--timeout", "40s", "--attempts", "2"},
			func(string) string { return "" }, &out, &out)
		if code(err) != 3 || !strings.Contains(out.String(), "giving up") {
			t.Fatalf("exit %d: %s", code(err), out.String())
		}
	})
}
