package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
)

// TestHAComponent: components/ha runs two replicas or more that never go
// below one (RollingUpdate with maxUnavailable 0, a PodDisruptionBudget of
// minAvailable 1 over the same pods, spread across nodes), with no volume
// and the connection from a Secret; serve takes its arguments and
// environment; the API server takes its objects.
func TestHAComponent(t *testing.T) {
	docs := overlay(t, "components/ha")
	var dep, pdb *unstructured.Unstructured
	for _, u := range docs {
		switch u.GetKind() {
		case "Deployment":
			dep = u
		case "PodDisruptionBudget":
			pdb = u
		case "PersistentVolumeClaim":
			t.Fatalf("a volume claim: %s", u.GetName())
		}
	}
	if dep == nil || pdb == nil {
		t.Fatal("no Deployment or no PodDisruptionBudget")
	}
	get := func(u *unstructured.Unstructured, path ...string) any {
		v, _, _ := unstructured.NestedFieldNoCopy(u.Object, path...)
		return v
	}
	if n, ok := number(get(dep, "spec", "replicas")); !ok || n < 2 {
		t.Fatalf("replicas %v, want 2 or more", get(dep, "spec", "replicas"))
	}
	if get(dep, "spec", "strategy", "type") != "RollingUpdate" || !isNumber(get(dep, "spec", "strategy", "rollingUpdate", "maxUnavailable"), 0) {
		t.Fatalf("strategy %v, want RollingUpdate with maxUnavailable 0", get(dep, "spec", "strategy"))
	}
	if !isNumber(get(pdb, "spec", "minAvailable"), 1) || !equalLabels(get(pdb, "spec", "selector", "matchLabels"), get(dep, "spec", "selector", "matchLabels")) {
		t.Fatalf("PodDisruptionBudget %v, want minAvailable 1 over the Deployment's pods", get(pdb, "spec"))
	}
	spread, _ := get(dep, "spec", "template", "spec", "topologySpreadConstraints").([]any)
	if len(spread) == 0 || spread[0].(map[string]any)["topologyKey"] != "kubernetes.io/hostname" {
		t.Fatalf("no spread across nodes: %v", spread)
	}
	for _, v := range get(dep, "spec", "template", "spec", "volumes").([]any) {
		if _, ok := v.(map[string]any)["persistentVolumeClaim"]; ok {
			t.Fatalf("a volume of a claim: %v", v)
		}
	}
	c := get(dep, "spec", "template", "spec", "containers").([]any)[0].(map[string]any)
	for _, m := range c["volumeMounts"].([]any) {
		if m.(map[string]any)["mountPath"] == "/data" {
			t.Fatal("/data is still mounted")
		}
	}
	env := map[string]string{}
	var fromSecret, podName bool
	for _, e := range c["env"].([]any) {
		e := e.(map[string]any)
		name, _ := e["name"].(string)
		if v, ok := e["value"].(string); ok {
			env[name] = v
		}
		from, _ := e["valueFrom"].(map[string]any)
		switch {
		case name == "FDN_POSTGRES" && from["secretKeyRef"] != nil:
			fromSecret = true
			env[name] = "host=/run/postgresql dbname=fdn" // what the Secret would give
		case name == "POD_NAME" && from["fieldRef"] != nil:
			podName = true
		}
	}
	if !fromSecret || !podName {
		t.Fatalf("FDN_POSTGRES from a Secret %v, POD_NAME from the pod %v", fromSecret, podName)
	}
	var args []string
	for _, a := range c["args"].([]any) {
		args = append(args, a.(string))
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--data-dir") }) {
		t.Fatalf("args %v name a data directory", args)
	}
	// serve takes them (with SMTP set, as the component's comment asks).
	env["FDN_SMTP_ADDR"] = "smtp.example.com:587"
	dir := t.TempDir()
	for _, f := range []string{"token", "verdict-token"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "/etc/flux-deploy-notifier", dir)
	}
	if _, err := parseServe(args[1:], func(k string) string { return env[k] }, io.Discard); err != nil {
		t.Fatalf("serve refuses the component's configuration: %v", err)
	}
	delete(env, "FDN_SMTP_ADDR")
	if _, err := parseServe(args[1:], func(k string) string { return env[k] }, io.Discard); err == nil || !strings.Contains(err.Error(), "--smtp-addr") {
		t.Fatalf("without SMTP: %v, want a clear refusal", err)
	}
	cl := clustertest.Start(t)
	for _, ns := range []string{"flux-system", "flux-deploy-notifier"} {
		cl.ApplyYAML(t, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n")
	}
	for _, u := range docs {
		if u.GetKind() == "Namespace" {
			continue
		}
		if err := cl.ServerSideApply(context.Background(), u, "manifests-check", true); err != nil {
			t.Errorf("%s/%s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

func equalLabels(a, b any) bool {
	am, _ := a.(map[string]any)
	bm, _ := b.(map[string]any)
	if len(am) == 0 || len(am) != len(bm) {
		return false
	}
	for k, v := range am {
		if bm[k] != v {
			return false
		}
	}
	return true
}

// number reads a YAML number as the decoders give it.
func number(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case float64:
		return int64(n), float64(int64(n)) == n
	}
	return 0, false
}

func isNumber(v any, want int64) bool {
	n, ok := number(v)
	return ok && n == want
}
