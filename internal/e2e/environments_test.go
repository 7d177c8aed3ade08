//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/api"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// environmentsOfTwoClusters: staging is the service's own cluster ("one",
// placed by --environments) and "one-b" (the same API server, registered
// by a Secret labelled fluxdeploy.dev/environment=staging), prod a second
// real cluster ("two", its own etcd, kube-apiserver and Flux controllers)
// registered by a Secret labelled prod. Commits roll out on staging,
// are promoted to prod by publishing the same commit there, and at each
// step GET /environments and the page (in Chromium) say what runs where
// and what lies between; the promotion gate's exit codes: the soak not
// reached (2), met (0), a failure in staging (1), a failure there within
// the soak (1). Prod promoted past a commit that failed in staging runs
// the fix, which contains it: nothing is left between.
func environmentsOfTwoClusters(t *testing.T, w *world) {
	two := clustertest.Start(t)
	StartFlux(t, two)
	two.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+w.ns+"}\n")
	rig2 := *w.rig
	rig2.c = two
	w2 := &world{rig: &rig2, ns: w.ns, repo: NewRepo(t, two, w.arts, w.ns, "fleet")}
	register, _ := w.registration(t, two, "two", "prod", "fdn-reader")
	w.c.ApplyYAML(t, register)
	// A third cluster, one-b, labelled staging: the first's own API
	// server, registered as the second is, read in the same namespace (as
	// every cluster is): a twin of one, known by its state alone.
	registerB, _ := w.registration(t, w.c, "one-b", "staging", "fdn-reader-b")
	w.c.ApplyYAML(t, registerB)

	r0 := w.repo.Publish(t, w.base("0"))
	if c := w2.repo.Publish(t, w.base("0")); c != r0 {
		t.Fatalf("prod's commit %s differs from staging's %s", c.Hash, r0.Hash)
	}
	w.svc = StartService(t, w.c, w.bin, w.ns, w.smtp.Addr, Options{Cluster: "one",
		Args: []string{"--cluster-secrets-namespace", w.ns, "--environments", "staging=one;prod"}})
	for i := range tiers {
		w.applyTier(t, i, tier{})
		w2.applyTier(t, i, tier{})
	}
	w.awaitCluster(t, r0, tiers...)
	w2.awaitCluster(t, r0, tiers...)
	page := newBrowser(t)
	short := func(c Commit) string { return c.Hash[:7] }

	// One commit everywhere: nothing between.
	w.awaitEnvironments(t, page, fmt.Sprintf("staging: all=%s one=running/%s one-b=running/%s\nprod: all=%s two=running/%s\nstaging>prod:\n",
		short(r0), short(r0), short(r0), short(r0), short(r0)),
		"Runs "+short(r0), "Runs "+short(r0), "prod has run everything staging deployed")

	// A commit on staging alone: between, not on two. The gate: its soak
	// of an hour not reached (2), one of a second met (0).
	r1 := w.repo.Publish(t, w.base("1"))
	w.svc.AwaitVerdictOn(t, "one", r1, rollout.VerdictApplied)
	w.awaitEnvironments(t, page, fmt.Sprintf("staging: all=%s one=running/%s one-b=running/%s\nprod: all=%s two=running/%s\nstaging>prod: %s(not on two)\n",
		short(r1), short(r1), short(r1), short(r0), short(r0), short(r1)),
		"Runs "+short(r1), "Runs "+short(r0), "1 commit staging deployed that prod has not run everywhere")
	w.expectGate(t, r1, 2, []string{"--soak", "1h", "--timeout", "3s"}, "soak of 1h0m0s on one-b not over")
	w.expectGate(t, r1, 0, []string{"--soak", "1s"}, "soak of 1s met on one-b")

	// A commit that fails in staging: the gate says 1 for it, and for r1,
	// whose soak it fell within; listed between, failed.
	broken := w.base("2").with("infra/broken.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: broken, namespace: "+w.ns+"-nowhere}\ndata: {a: b}\n")
	r2 := w.repo.Publish(t, broken)
	w.svc.AwaitVerdictOn(t, "one", r2, rollout.VerdictFailed)
	w.awaitEnvironments(t, page, fmt.Sprintf("staging: one=failed one-b=failed\nprod: all=%s two=running/%s\nstaging>prod: %s(not on two) %s(not on two)\n",
		short(r0), short(r0), short(r2), short(r1)),
		"failed on one, one-b", "Runs "+short(r0), "2 commits staging deployed")
	w.expectGate(t, r2, 1, []string{"--soak", "1s"}, "on one: failed")
	w.expectGate(t, r1, 1, []string{"--soak", "1h"}, "soak failed on one: a newer rollout, "+short(r2)+", failed")

	// r1 promoted to prod: r2 alone between.
	if c := w2.repo.Publish(t, w.base("1")); c != r1 {
		t.Fatalf("prod's commit %s differs from staging's %s", c.Hash, r1.Hash)
	}
	w.svc.AwaitVerdictOn(t, "two", r1, rollout.VerdictApplied)
	w.awaitEnvironments(t, page, fmt.Sprintf("staging: one=failed one-b=failed\nprod: all=%s two=running/%s\nstaging>prod: %s(not on two)\n",
		short(r1), short(r1), short(r2)),
		"failed on one, one-b", "Runs "+short(r1), "1 commit staging deployed")

	// The fix on staging, then on prod, which skips r2: r2 went out there
	// inside the fix, so nothing is left between.
	r3 := w.repo.Publish(t, w.base("3"))
	w.svc.AwaitVerdictOn(t, "one", r3, rollout.VerdictApplied)
	w2.repo.n = w.repo.n - 1 // the same commit, as the next after r2 in the one history
	if c := w2.repo.Publish(t, w.base("3")); c != r3 {
		t.Fatalf("prod's commit %s differs from staging's %s", c.Hash, r3.Hash)
	}
	w.svc.AwaitVerdictOn(t, "two", r3, rollout.VerdictApplied)
	w.awaitEnvironments(t, page, fmt.Sprintf("staging: all=%s one=running/%s one-b=running/%s\nprod: all=%s two=running/%s\nstaging>prod:\n",
		short(r3), short(r3), short(r3), short(r3), short(r3)),
		"Runs "+short(r3), "Runs "+short(r3), "prod has run everything staging deployed")
	w.expectGate(t, r3, 0, []string{"--soak", "1s"}, "soak of 1s met on one")
	if code, out, err := w.svc.Wait(r3, "--environment", "prod", "--timeout", "1m"); err != nil || code != 0 || !strings.Contains(out, "on two: applied") {
		t.Fatalf("wait --environment prod: exit %d (%v)\n%s", code, err, out)
	}
}

// expectGate runs the promotion gate from staging on c and checks its
// exit code and that its output says says.
func (w *world) expectGate(t *testing.T, c Commit, code int, args []string, says string) {
	t.Helper()
	got, out, err := w.svc.Wait(c, append([]string{"--promote-from", "staging"}, args...)...)
	if err != nil || got != code || !strings.Contains(out, says) {
		t.Fatalf("wait %s --promote-from staging %s: exit %d (%v), want %d saying %q\n%s", c.Hash[:7], strings.Join(args, " "), got, err, code, says, out)
	}
}

// environmentsLine is GET /environments in a line per environment and one
// per pair: each cluster's state and running commit, and what lies
// between with the clusters that have not run it.
func environmentsLine(r *api.EnvironmentsResponse) string {
	var b strings.Builder
	for _, e := range r.Environments {
		fmt.Fprintf(&b, "%s:", e.Name)
		if e.Running != nil {
			fmt.Fprintf(&b, " all=%s", e.Running.Commit[:7])
		}
		for _, c := range e.Clusters {
			fmt.Fprintf(&b, " %s=%s", c.Cluster, c.State)
			if c.Running != nil {
				fmt.Fprintf(&b, "/%s", c.Running.Commit[:7])
			}
		}
		b.WriteString("\n")
	}
	for _, bt := range r.Between {
		fmt.Fprintf(&b, "%s>%s:", bt.Lower, bt.Higher)
		for _, p := range bt.Commits {
			fmt.Fprintf(&b, " %s(not on %s)", p.Commit[:7], strings.Join(p.NotRunOn, ","))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// awaitEnvironments polls GET /environments until it reads want, then
// checks the page, in Chromium, says the same: staging's section, prod's,
// and what lies between.
func (w *world) awaitEnvironments(t *testing.T, page context.Context, want, staging, prod, between string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		resp, err := http.Get(w.svc.URL + "/environments")
		if err != nil {
			t.Fatal(err)
		}
		var body api.EnvironmentsResponse
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if got = environmentsLine(&body); err == nil && got == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/environments:\n%s\nwant\n%s\nthe rollouts:\n%s", got, want, w.rolloutsList(t))
		}
	}
	ctx, cancel := context.WithTimeout(page, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(w.svc.URL+"/ui/environments")); err != nil {
		t.Fatal(err)
	}
	text := func(sel string) string {
		v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		return v
	}
	s, p, b := text("#env-staging"), text("#env-prod"), text("#between-staging-prod")
	if !strings.Contains(s, staging) || !strings.Contains(p, prod) || !strings.Contains(b, between) {
		t.Fatalf("the page says\nstaging: %s\nprod: %s\nbetween: %s\nwant %q, %q, %q", s, p, b, staging, prod, between)
	}
}

// newBrowser starts headless Chromium (make e2e installs it) and returns
// a tab's context.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed (make browser)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("no-first-run", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// rolloutsList is every rollout the service lists, a line each: what
// /environments is read from.
func (w *world) rolloutsList(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(w.svc.URL + "/rollouts?layers=none&limit=100")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var body api.RolloutsResponse
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, v := range body.Rollouts {
		fmt.Fprintf(&b, "%s %s %s first %s last %s\n", v.Cluster, v.Hash[:7], v.Verdict, v.FirstSeen.Format(time.RFC3339Nano), v.LastSeen.Format(time.RFC3339Nano))
	}
	return b.String()
}
