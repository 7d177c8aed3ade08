package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ancestry/gittest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/wait"
)

// TestWaitSkippedCommit: a commit never deployed on its own takes the
// verdict of the earliest deployed commit that contains it, as git (a real
// repository, a shallow CI checkout) says; a commit no deployed revision
// contains stays unknown.
func TestWaitSkippedCommit(t *testing.T) {
	origin := gittest.New(t)
	base := origin.Commit("base")
	a := origin.Commit("a: merged, then b within one source interval")
	checkout := origin.Clone(1) // the pipeline of a checks out a alone
	if gittest.Has(checkout, base) {
		t.Fatal("the checkout is not shallow")
	}
	b := origin.Commit("b")
	origin.Branch("feature", a)
	f := origin.Commit("f: a pull request's commit")
	featureCheckout := origin.Clone(1)
	origin.Checkout("main")
	m := origin.Merge("feature")
	origin.Branch("other", base)
	other := origin.Commit("on a branch never merged")
	otherCheckout := origin.Clone(1)
	origin.Checkout("main")

	url, token := serveEvents(t)
	// What the clusters deployed: b and m; never a, f or other.
	//   staging: b applied, then m applied
	//   prod:    b failed (the earliest to contain a), then m applied
	now := time.Now().UTC().Add(-time.Minute)
	var events []flux.Event
	deploy := func(cluster, hash string, sec int, platform string) {
		events = append(events, deployed(cluster, "main@sha1:"+hash, now.Add(time.Duration(sec)*time.Second), platform)...)
	}
	deploy("staging", b, 0, "ReconciliationSucceeded")
	deploy("staging", m, 10, "ReconciliationSucceeded")
	deploy("prod", b, 0, "HealthCheckFailed")
	deploy("prod", m, 10, "ReconciliationSucceeded")
	if err := postEvents(context.Background(), &http.Client{Timeout: 10 * time.Second}, url, token, events); err != nil {
		t.Fatal(err)
	}

	path := os.Getenv("PATH")
	waitAt := func(url string, env map[string]string, gitDir string, args ...string) (string, string, error) {
		var stdout, stderr bytes.Buffer
		args = append([]string{"wait", "--url", url, "--timeout", "3s"}, args...)
		if gitDir != "" {
			args = append(args, "--git-dir", gitDir)
		}
		err := run(context.Background(), args, func(k string) string { return env[k] }, &stdout, &stderr)
		return stdout.String(), stderr.String(), err
	}
	waitIn := func(gitDir, path string, args ...string) (string, string, error) {
		return waitAt(url, map[string]string{"PATH": path}, gitDir, args...)
	}
	for _, tt := range []struct {
		name   string
		gitDir string
		path   string
		args   []string
		exit   int
		says   []string
		never  []string
	}{
		{"skipped, then applied", checkout, path, []string{"--rev", a, "--cluster", "staging"}, 0,
			[]string{flux.Short(a) + " on staging: not deployed on its own; " + flux.Short(b) + " contains it",
				flux.Short(a) + " was not deployed on its own: it went out in " + flux.Short(b) + ", applied", "main@sha1:" + b + " on staging: applied"}, nil},
		{"skipped, then failed: the earliest descendant decides", checkout, path, []string{"--rev", a, "--cluster", "prod"}, 1,
			[]string{flux.Short(a) + " was not deployed on its own: it went out in " + flux.Short(b) + ", failed", "failure: flux-system/platform HealthCheckFailed"},
			[]string{"went out in " + flux.Short(m)}},
		{"merged by a merge commit", featureCheckout, path, []string{"--rev", f[:10], "--cluster", "staging"}, 0,
			[]string{flux.Short(f) + " was not deployed on its own: it went out in " + flux.Short(m) + ", applied"}, nil},
		{"several clusters, mixed", checkout, path, []string{"--rev", a, "--cluster", "staging,prod"}, 1,
			[]string{"== staging\n" + flux.Short(a) + " was not deployed on its own: it went out in " + flux.Short(b) + ", applied",
				"== prod\n" + flux.Short(a) + " was not deployed on its own: it went out in " + flux.Short(b) + ", failed"}, nil},
		{"on another branch", otherCheckout, path, []string{"--rev", other, "--cluster", "staging"}, 2,
			[]string{other + ": unknown", "no deployed revision contains it: 2 rollouts since", "timed out after 3s"},
			[]string{"went out in"}},
		{"git missing", checkout, t.TempDir(), []string{"--rev", a, "--cluster", "staging"}, 2,
			[]string{"git cannot tell whether a later revision contains it (git is not installed (not on PATH))",
				"git could not tell whether a later revision contains it", "timed out after 3s"},
			[]string{"went out in"}},
		{"not in a repository", t.TempDir(), path, []string{"--rev", a, "--cluster", "staging"}, 2,
			[]string{"is not in a git repository (--git-dir)", "timed out after 3s"}, []string{"went out in"}},
		{"--no-ancestry", checkout, path, []string{"--rev", a, "--cluster", "staging", "--no-ancestry"}, 2,
			[]string{a + ": unknown (no evidence of this revision yet)", "timed out after 3s"}, []string{"went out in", "git"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := waitIn(tt.gitDir, tt.path, tt.args...)
			out := stdout + stderr
			if exitOf(err) != tt.exit {
				t.Fatalf("exit %d (%v), want %d\n%s", exitOf(err), err, tt.exit, out)
			}
			for _, s := range tt.says {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.never {
				if strings.Contains(out, s) {
					t.Errorf("output has %q:\n%s", s, out)
				}
			}
		})
	}

	t.Run("the descendant deploys while waiting", func(t *testing.T) {
		origin.Checkout("main")
		a2 := origin.Commit("a2")
		checkout := origin.Clone(1)
		b2 := origin.Commit("b2")
		// The service behind a proxy that counts wait's looks for rollouts.
		var listed atomic.Int64
		front := listProxy(t, url, func(*http.Request) { listed.Add(1) })
		done := make(chan string, 1)
		go func() {
			stdout, stderr, err := waitAt(front.URL, map[string]string{"PATH": path}, checkout, "--rev", a2, "--cluster", "qa", "--timeout", "60s")
			done <- strings.Join([]string{fmt.Sprint(exitOf(err)), stdout, stderr}, "\n")
		}()
		// Posted once wait has looked and found nothing: it must look again.
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("wait never asked for the rollouts")
			}
			if listed.Load() > 0 {
				break
			}
		}
		events = events[:0]
		deploy("qa", b2, 20, "ReconciliationSucceeded")
		if err := postEvents(context.Background(), &http.Client{Timeout: 10 * time.Second}, url, token, events); err != nil {
			t.Fatal(err)
		}
		out := <-done
		if !strings.HasPrefix(out, "0\n") || !strings.Contains(out, flux.Short(a2)+" was not deployed on its own: it went out in "+flux.Short(b2)+", applied") {
			t.Fatalf("exit and output:\n%s", out)
		}
	})

	t.Run("pages: the oldest contains it first", func(t *testing.T) {
		// The service behind a proxy that cuts every list to one rollout a
		// page: wait must read them all, oldest last, and stop at a bound.
		front := listProxy(t, url, func(r *http.Request) {
			q := r.URL.Query()
			q.Set("limit", "1")
			r.URL.RawQuery = q.Encode()
		})
		env := map[string]string{"PATH": path}
		stdout, stderr, err := waitAt(front.URL, env, checkout, "--rev", a, "--cluster", "prod")
		if out := stdout + stderr; exitOf(err) != 1 || !strings.Contains(out, "it went out in "+flux.Short(b)+", failed") {
			t.Fatalf("prod, a page a rollout: exit %d\n%s", exitOf(err), out)
		}
		events = events[:0]
		for i := range wait.MaxPages + 1 {
			deploy("busy", fmt.Sprintf("%040x", 0xb000+i), 30+2*i, "ReconciliationSucceeded")
		}
		if err := postEvents(context.Background(), &http.Client{Timeout: 10 * time.Second}, url, token, events); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, err = waitAt(front.URL, env, checkout, "--rev", a, "--cluster", "busy")
		if out := stdout + stderr; exitOf(err) != 2 || !strings.Contains(out, "too many to look through for one that contains it") {
			t.Fatalf("more pages than one look reads: exit %d\n%s", exitOf(err), out)
		}
	})

	// The pipeline's depth-1 checkout had neither b nor m: wait fetched
	// them (the bound on how far is internal/ancestry's test).
	if !gittest.Has(checkout, b) || !gittest.Has(featureCheckout, m) {
		t.Fatal("the shallow checkouts were never deepened")
	}

	t.Run("the GitHub step summary names the commit it went out in", func(t *testing.T) {
		summary := filepath.Join(t.TempDir(), "summary.md")
		env := map[string]string{"PATH": path, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": summary}
		if _, _, err := waitAt(url, env, checkout, "--rev", a, "--cluster", "staging"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := waitAt(url, env, otherCheckout, "--rev", other, "--cluster", "prod"); exitOf(err) != 2 {
			t.Fatalf("another branch: %v", err)
		}
		md, err := os.ReadFile(summary)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"| staging | applied | went out in " + flux.Short(b) + ": all 2 expected layers applied it |",
			"| prod | unknown | no evidence of this commit; no deployed revision contains it: 2 rollouts since"} {
			if !strings.Contains(string(md), want) {
				t.Errorf("summary lacks %q:\n%s", want, md)
			}
		}
	})

	t.Run("JSON names the commit it went out in", func(t *testing.T) {
		stdout, _, err := waitIn(checkout, path, "--rev", a, "--cluster", "prod,staging", "--output", "json")
		var res wait.Result
		if jerr := json.Unmarshal([]byte(stdout), &res); jerr != nil {
			t.Fatalf("not JSON (%v):\n%s", jerr, stdout)
		}
		if exitOf(err) != 1 || res.Exit != 1 || len(res.Clusters) != 2 || res.Clusters[0].Outcome != "failed" || res.Clusters[0].DeployedIn != b ||
			res.Clusters[1].Outcome != "applied" || res.Clusters[1].DeployedIn != b || res.Clusters[1].Verdict.Hash != b {
			t.Fatalf("exit %d, result %+v", exitOf(err), res)
		}
		stdout, _, _ = waitIn(otherCheckout, path, "--rev", other, "--cluster", "prod", "--output", "json")
		if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Clusters[0].Outcome != "unknown" ||
			!strings.Contains(res.Clusters[0].Why, "no deployed revision contains it") {
			t.Fatalf("another branch: %v %+v", err, res)
		}
	})
}

// listProxy serves url behind a proxy that calls onList with each request
// for /rollouts before passing it on, until the test ends.
func listProxy(t *testing.T, url string, onList func(*http.Request)) *httptest.Server {
	t.Helper()
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/rollouts" {
			onList(r)
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front
}

// TestWaitSkippedCommitSHA256: the same in a repository of git's sha256
// object format, whose GitRepository names revisions main@sha256:<64 hex>:
// the rollout's revision is a git commit (its source says so), not an
// artifact's digest, and wait's ancestry finds the commit inside it.
func TestWaitSkippedCommitSHA256(t *testing.T) {
	origin := gittest.NewSHA256(t)
	origin.Commit("base")
	a := origin.Commit("a: merged, then b within one source interval")
	checkout := origin.Clone(1)
	b := origin.Commit("b")
	if len(a) != 64 || len(b) != 64 {
		t.Fatalf("commits %s and %s: not sha256", a, b)
	}
	url, token := serveEvents(t)
	now := time.Now().UTC().Add(-time.Minute)
	rev := "main@sha256:" + b
	// Its source's event says the revision is a GitRepository's: a commit.
	events := append([]flux.Event{{
		InvolvedObject: flux.ObjectRef{Kind: "GitRepository", Namespace: "flux-system", Name: "fleet"},
		Severity:       "info", Timestamp: now.Format(time.RFC3339), Reason: "NewArtifact",
		Message: "stored artifact for commit 'b'", Metadata: map[string]string{"revision": rev, "cluster": "staging"},
	}}, deployed("staging", rev, now.Add(time.Second), "ReconciliationSucceeded")...)
	if err := postEvents(context.Background(), &http.Client{Timeout: 10 * time.Second}, url, token, events); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	env := map[string]string{"PATH": os.Getenv("PATH")}
	err := run(context.Background(), []string{"wait", "--url", url, "--timeout", "10s", "--rev", a, "--cluster", "staging", "--git-dir", checkout},
		func(k string) string { return env[k] }, &stdout, &stderr)
	out := stdout.String() + stderr.String()
	if exitOf(err) != 0 || !strings.Contains(out, flux.Short(a)+" was not deployed on its own: it went out in "+flux.Short(b)+", applied") {
		t.Fatalf("exit %d (%v)\n%s", exitOf(err), err, out)
	}
}

// serveEvents runs the service on events alone, and returns its URL and
// the HMAC token its webhook takes.
func serveEvents(t *testing.T) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	token := []byte("hmac-token")
	if err := os.WriteFile(filepath.Join(dir, "token"), token, 0o600); err != nil {
		t.Fatal(err)
	}
	return startServe(t, nil, "--listen", "127.0.0.1:0", "--data-dir", dir, "--hmac-token-file", filepath.Join(dir, "token")), token
}

// deployed are the events of layers infra and platform rolling out rev on
// cluster from at on, one second apart: platform ends with the reason
// given (an error unless ReconciliationSucceeded).
func deployed(cluster, rev string, at time.Time, platform string) []flux.Event {
	severity := "info"
	if platform != "ReconciliationSucceeded" {
		severity = "error"
	}
	var out []flux.Event
	for i, l := range []struct{ layer, reason, severity string }{{"infra", "ReconciliationSucceeded", "info"}, {"platform", platform, severity}} {
		out = append(out, flux.Event{
			InvolvedObject: flux.ObjectRef{Kind: "Kustomization", Namespace: "flux-system", Name: l.layer},
			Severity:       l.severity, Timestamp: at.Add(time.Duration(i) * time.Second).Format(time.RFC3339),
			Reason: l.reason, Message: l.reason + " in " + l.layer, Metadata: map[string]string{"revision": rev, "cluster": cluster},
		})
	}
	return out
}
