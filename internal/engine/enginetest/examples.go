package enginetest

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// ExampleMails runs a realistic week of deploys through a real engine on a
// store in dir, and returns every mail it made due, one of each kind: the
// material of the golden files and of make mail-preview. now is the clock;
// the rollouts happen in the hour before it.
func ExampleMails(dir string, now time.Time) ([]outbox.Queued, error) {
	db, err := store.Open(dir)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: []string{"platform-team@example.com"}, Verify: true, CommitOf: flux.GitCommit}
	// The clock follows the events, so each mail shows the rollout as it
	// stood when the mail became due.
	var clock time.Time
	e, err := engine.New(db, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return clock })
	if err != nil {
		return nil, err
	}
	obs := ExampleObservations(now.Add(-time.Hour))
	// Last, a heartbeat once the clock reads now: the stuck rollout is
	// evaluated past its deadline.
	last := obs[len(obs)-1]
	last.At = now.Add(-time.Minute)
	obs = append(obs, last)
	for _, o := range obs {
		clock = o.At.Add(time.Minute)
		if err := e.Submit(context.Background(), o); err != nil {
			return nil, fmt.Errorf("submit: %w", err)
		}
	}
	return db.Pending()
}

// ExampleObservations are the example rollouts, from t0 on, on cluster
// prod: R1 applied, R2 failed (prune), R3 failed (health check), R5
// failed (a HelmRelease's upgrade, rolled back), R4 stuck on apps once the
// clock passes its deadline.
func ExampleObservations(t0 time.Time) []rollout.Observation {
	rev := func(label string) (string, string) {
		s := sha1.Sum([]byte("example-" + label))
		h := hex.EncodeToString(s[:])
		return "main@sha1:" + h, h
	}
	var out []rollout.Observation
	add := func(label, kind, name string, sec int, sig rollout.Signal, reason, msg string) *rollout.Observation {
		r, h := rev(label)
		out = append(out, rollout.Observation{
			Cluster: "prod", Emitter: ingest.Emitter(kind, "flux-system", name),
			Revision: r, Hash: h, At: t0.Add(time.Duration(sec) * time.Second), Signal: sig, Reason: reason, Message: msg,
		})
		if sig == rollout.SignalFailed {
			out[len(out)-1].Class = ingest.FailureClass(reason)
		}
		return &out[len(out)-1]
	}
	ks := flux.KindKustomization
	layers := []string{"infra", "platform", "apps"}
	rollout1 := func(label, subject string, sec int) {
		add(label, "GitRepository", "flux-system", sec, rollout.SignalArtifact, "NewArtifact",
			"stored artifact for commit '"+subject+"'").Subject = subject
		for _, l := range layers[1:] {
			add(label, ks, l, sec+1, rollout.SignalWaiting, "DependencyNotReady", "Dependencies do not meet ready condition, retrying in 30s")
		}
	}
	done := "Reconciliation finished in 2.3s, next run in 10m0s"

	// A clean deploy: applying, then applied with every layer's time.
	rollout1("R1", "Bump web to v1.4.2 (#412)", 0)
	for i, l := range layers {
		add("R1", ks, l, 2+30*i, rollout.SignalProgressing, "Progressing", "Deployment/"+l+"/web configured")
		add("R1", ks, l, 3+30*i, rollout.SignalProgressing, "Progressing", "Health check passed in 2.04s").Healthy = true
		add("R1", ks, l, 4+30*i, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	}
	// Flux could not delete a removed ConfigMap.
	rollout1("R2", "Remove the legacy settings (#413)", 300)
	add("R2", ks, "infra", 302, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	add("R2", ks, "platform", 332, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	add("R2", ks, "apps", 362, rollout.SignalFailed, "PruneFailed",
		`delete failed, errors: ConfigMap/apps/old-config delete failed: configmaps "old-config" is forbidden: ValidatingAdmissionPolicy 'protect-configmaps' with binding 'protect-configmaps' denied request: ConfigMaps labelled protect=true may not be deleted;`).
		Objects = []rollout.Object{{Kind: "ConfigMap", Namespace: "apps", Name: "old-config",
		Error: `configmaps "old-config" is forbidden: ValidatingAdmissionPolicy 'protect-configmaps' with binding 'protect-configmaps' denied request: ConfigMaps labelled protect=true may not be deleted`}}
	// A health check that never passes.
	rollout1("R3", "Raise web replicas to 6 (#414)", 600)
	add("R3", ks, "infra", 602, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	add("R3", ks, "platform", 632, rollout.SignalProgressing, "Progressing", "Deployment/platform/ingress configured")
	add("R3", ks, "platform", 932, rollout.SignalFailed, "HealthCheckFailed",
		"health check failed after 5m0.01s: timeout waiting for: [Deployment/platform/ingress status: 'InProgress']")
	// A HelmRelease whose upgrade fails, which helm-controller rolls back.
	rollout1("R5", "Set web's log level from values (#416)", 1000)
	add("R5", ks, "infra", 1002, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	add("R5", ks, "platform", 1032, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	add("R5", ks, "apps", 1062, rollout.SignalProgressing, "Progressing", "HelmRelease/apps/web configured").
		Holds = []rollout.Emitter{ingest.Emitter(flux.KindHelmRelease, "apps", "web")}
	add("R5", ks, "apps", 1062, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	release := func(sec int, sig rollout.Signal, reason, msg string) {
		o := rollout.Observation{Cluster: "prod", Emitter: ingest.Emitter(flux.KindHelmRelease, "apps", "web"),
			At: t0.Add(time.Duration(sec) * time.Second), Signal: sig, Reason: reason, Message: msg}
		if sig == rollout.SignalFailed {
			o.Class = ingest.FailureClass(reason)
		}
		if s, ok := ingest.RemediationStep(reason, msg, o.At); ok {
			o.Remedy = &rollout.Remedy{Steps: []rollout.Step{s}}
		}
		out = append(out, o)
	}
	release(1070, rollout.SignalFailed, flux.ReasonUpgradeFailed,
		"Helm upgrade failed for release apps/web with chart web@1.4.2: execution error at (web/templates/configmap.yaml:3:11): logLevel must be one of debug, info, warn\n\nLast Helm logs:\n\npreparing upgrade for web")
	release(1071, rollout.SignalProgressing, flux.ReasonRollbackSucceeded,
		"Helm rollback to previous release apps/web.v4 with chart web@1.4.2 succeeded")
	// A layer that never moves: stuck by the time the clock reads now.
	rollout1("R4", "Recovered: revert replicas (#415)", 1200)
	add("R4", ks, "infra", 1202, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	add("R4", ks, "platform", 1232, rollout.SignalSucceeded, "ReconciliationSucceeded", done)
	return out
}
