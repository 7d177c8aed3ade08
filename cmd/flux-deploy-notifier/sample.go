package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
)

// sample posts, signed as notification-controller would, the events of one
// rollout of a new commit through three layers (infra <- platform <- apps),
// then prints its verdict: a newcomer sees the service work end to end.
func sample(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("sample", getenv, stderr)
	url := f.String("url", "FDN_URL", "http://127.0.0.1:8080", "base URL of a running flux-deploy-notifier")
	tokenFile := f.String("token-file", "FDN_HMAC_TOKEN_FILE", "./data/dev-token", "token the service was started with")
	scenario := f.String("scenario", "FDN_SAMPLE_SCENARIO", "clean", "clean, prune-failed or helm-failed")
	cluster := f.String("cluster", "FDN_SAMPLE_CLUSTER", "dev", "cluster name sent as metadata.cluster")
	start := f.String("start", "FDN_SAMPLE_START", "", "RFC 3339 time of the rollout's first event (default 20 s ago)")
	if err := f.parse(args); err != nil {
		return err
	}
	if *scenario != "clean" && *scenario != "prune-failed" && *scenario != "helm-failed" {
		return fmt.Errorf("--scenario must be clean, prune-failed or helm-failed, not %q", *scenario)
	}
	token, err := os.ReadFile(*tokenFile)
	if err != nil {
		return fmt.Errorf("read token: %w", err)
	}
	t0 := time.Now().UTC().Add(-20 * time.Second)
	if *start != "" {
		if t0, err = time.Parse(time.RFC3339, *start); err != nil {
			return fmt.Errorf("--start: %w", err)
		}
	}
	events := sampleEvents(*scenario, *cluster, t0)
	client := &http.Client{Timeout: 10 * time.Second}
	base := strings.TrimRight(*url, "/")
	if err := postEvents(ctx, client, base, token, events); err != nil {
		return err
	}
	rev := events[0].Metadata["revision"]
	fmt.Fprintf(stdout, "posted %d events of a %s rollout of %s\n", len(events), *scenario, rev)
	verdictURL := fmt.Sprintf("%s/verdict?rev=%s&cluster=%s", base, rev[strings.LastIndexByte(rev, ':')+1:], *cluster)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, verdictURL, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("get verdict: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("get verdict: %w", err)
	}
	// The service answers compact JSON; a person reads it indented.
	var out bytes.Buffer
	if json.Indent(&out, body, "", "  ") != nil {
		out.Reset()
		out.Write(body)
	}
	fmt.Fprintf(stdout, "GET %s\n%s", verdictURL, out.Bytes())
	return nil
}

func sampleEvents(scenario, cluster string, t0 time.Time) []flux.Event {
	raw := make([]byte, 20)
	_, _ = rand.Read(raw)
	sum := sha1.Sum(raw)
	rev := "main@sha1:" + hex.EncodeToString(sum[:])
	at := func(s int) string { return t0.Add(time.Duration(s) * time.Second).Format(time.RFC3339) }
	meta := map[string]string{"revision": rev, "cluster": cluster}
	ks := func(name, sev, reason, msg string, s int) flux.Event {
		return flux.Event{
			InvolvedObject: flux.ObjectRef{Kind: flux.KindKustomization, Namespace: "flux-system", Name: name,
				APIVersion: "kustomize.toolkit.fluxcd.io/v1"},
			Severity: sev, Timestamp: at(s), Message: msg, Reason: reason, Metadata: meta,
			ReportingController: "kustomize-controller",
		}
	}
	evs := []flux.Event{
		{
			InvolvedObject: flux.ObjectRef{Kind: flux.KindGitRepository, Namespace: "flux-system", Name: "flux-system",
				APIVersion: "source.toolkit.fluxcd.io/v1"},
			Severity: flux.SeverityInfo, Timestamp: at(0), Reason: flux.ReasonNewArtifact, Metadata: meta,
			Message:             "stored artifact for commit 'Bump web to v1.4.2'",
			ReportingController: "source-controller",
		},
		ks("platform", flux.SeverityInfo, flux.ReasonDependencyNotReady, "Dependencies do not meet ready condition, retrying in 30s", 1),
		ks("apps", flux.SeverityInfo, flux.ReasonDependencyNotReady, "Dependencies do not meet ready condition, retrying in 30s", 1),
		ks("infra", flux.SeverityInfo, flux.ReasonProgressing, "ConfigMap/infra/cluster-settings configured", 2),
		ks("infra", flux.SeverityInfo, flux.ReasonReconciliationSucceeded, "Reconciliation finished in 212ms, next run in 10m0s", 2),
		ks("platform", flux.SeverityInfo, flux.ReasonProgressing, "Deployment/platform/ingress-nginx configured", 4),
		ks("platform", flux.SeverityInfo, flux.ReasonProgressing, "Health check passed in 2.1s", 6),
		ks("platform", flux.SeverityInfo, flux.ReasonReconciliationSucceeded, "Reconciliation finished in 2.4s, next run in 10m0s", 6),
		ks("apps", flux.SeverityInfo, flux.ReasonProgressing, "Deployment/apps/web configured\nConfigMap/apps/old-config deleted", 8),
	}
	if scenario == "prune-failed" {
		evs[len(evs)-1].Message = "Deployment/apps/web configured"
		return append(evs, ks("apps", flux.SeverityError, flux.ReasonPruneFailed,
			`delete failed, errors: ConfigMap/apps/old-config delete failed: configmaps "old-config" is forbidden: `+
				`ValidatingAdmissionPolicy 'protect-configmaps' with binding 'protect-configmaps' denied request: `+
				`ConfigMaps labelled protect=true may not be deleted;`, 9))
	}
	if scenario == "helm-failed" {
		// The apps layer (no wait) applies a HelmRelease; helm-controller's
		// upgrade then fails and it rolls the release back.
		hr := func(sev, reason, msg string, s int) flux.Event {
			return flux.Event{
				InvolvedObject: flux.ObjectRef{Kind: flux.KindHelmRelease, Namespace: "apps", Name: "web",
					APIVersion: "helm.toolkit.fluxcd.io/v2"},
				Severity: sev, Timestamp: at(s), Message: msg, Reason: reason,
				Metadata:            map[string]string{"revision": "1.4.2", "token": "sha256:4f1e", "cluster": cluster},
				ReportingController: "helm-controller",
			}
		}
		evs[len(evs)-1].Message = "HelmRelease/apps/web configured"
		return append(evs,
			ks("apps", flux.SeverityInfo, flux.ReasonReconciliationSucceeded, "Reconciliation finished in 180ms, next run in 10m0s", 8),
			hr(flux.SeverityError, flux.ReasonUpgradeFailed, "Helm upgrade failed for release apps/web with chart web@1.4.2: "+
				"execution error at (web/templates/configmap.yaml:3:11): logLevel must be one of debug, info, warn\n\nLast Helm logs:\n\npreparing upgrade for web", 10),
			hr(flux.SeverityInfo, flux.ReasonRollbackSucceeded, "Helm rollback to previous release apps/web.v4 with chart web@1.4.2 succeeded", 11))
	}
	return append(evs,
		ks("apps", flux.SeverityInfo, flux.ReasonProgressing, "Health check passed in 3.4s", 12),
		ks("apps", flux.SeverityInfo, flux.ReasonReconciliationSucceeded, "Reconciliation finished in 3.9s, next run in 10m0s", 12))
}

// postEvents posts events to /webhook, signed as notification-controller
// signs them, and wants a 202 for each.
func postEvents(ctx context.Context, client *http.Client, base string, token []byte, events []flux.Event) error {
	for _, ev := range events {
		body, err := json.Marshal(ev)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/webhook", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Gotk-Component", ev.ReportingController)
		req.Header.Set("X-Signature", signature.Sign(token, body))
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("post event: %w", err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return fmt.Errorf("post event: %s: %s", resp.Status, bytes.TrimSpace(msg))
		}
	}
	return nil
}
