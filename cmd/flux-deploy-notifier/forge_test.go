package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge/forgetest"
)

// TestForgeDeploymentAfterSIGKILL: the service is killed while GitHub
// makes the rollout's deployment, before it learns its id; restarted, it
// finds that deployment again (by its marker) and posts the verdict on
// it: exactly one deployment, its status the verdict.
func TestForgeDeploymentAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the real binary")
	}
	gh := forgetest.StartGitHub(t, "ghs_serve-test", time.Now, "acme/fleet")
	ghToken := filepath.Join(t.TempDir(), "github-token")
	if err := os.WriteFile(ghToken, []byte("ghs_serve-test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := []byte("forge-token")
	args := append(serviceArgs(t, t.TempDir(), token), "--default-cluster", "prod", "--external-url", "https://fdn.example.com",
		"--github-api-url", gh.URL, "--github-token-file", ghToken, "--github-repo", "acme/fleet")
	bin := buildBinary(t, true)

	var mu sync.Mutex
	var victim *child
	killed := make(chan struct{})
	gh.AfterCreate(func(forgetest.Deployment) {
		mu.Lock()
		defer mu.Unlock()
		if victim != nil {
			_ = victim.cmd.Process.Kill() // only the process this test started
			victim = nil
			close(killed)
		}
	})
	first := startChild(t, bin, args...)
	mu.Lock()
	victim = first
	mu.Unlock()
	e := crashEvents(1, 1)[0]
	if code := post(http.DefaultClient, first.url, token, e); code != http.StatusAccepted {
		t.Fatalf("event answered %d", code)
	}
	select {
	case <-killed:
	case <-time.After(30 * time.Second):
		t.Fatalf("no deployment made:\n%s", first.logs.String())
	}
	_ = first.cmd.Wait()
	if deps := gh.Deployments("acme/fleet"); len(deps) != 1 || len(deps[0].Statuses) != 0 {
		t.Fatalf("before the restart: %+v, want one deployment without a status", deps)
	}

	second := startChild(t, bin, args...)
	var deps []forgetest.Deployment
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if deps = gh.Deployments("acme/fleet"); len(deps) > 0 && len(deps[0].Statuses) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status after the restart:\n%s", second.logs.String())
		}
	}
	if len(deps) != 1 {
		t.Fatalf("%d deployments, want the one made before the kill", len(deps))
	}
	var got []string
	for _, s := range deps[0].Statuses {
		got = append(got, s.State)
	}
	st := deps[0].Statuses[0]
	if !slices.Equal(got, []string{"success"}) || deps[0].SHA != e.hash || deps[0].Environment != "prod" ||
		st.LogURL != "https://fdn.example.com/ui/prod/"+e.hash {
		t.Fatalf("deployment %+v, statuses %v: want success on %s in prod, linking to the rollout's page", deps[0], got, e.hash)
	}
	if code, warnings := readyz(t, second.url); code != http.StatusOK || len(warnings) != 0 {
		t.Fatalf("/readyz %d %v", code, warnings)
	}
	resp, err := http.Get(second.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `fdn_forge_deliveries_total{forge="github",outcome="sent"} 1`) ||
		!strings.Contains(string(b), `fdn_forge_deliveries_total{forge="github",outcome="dead"} 0`) {
		t.Fatalf("/metrics lacks the delivery sent and the outcomes at 0:\n%s", b)
	}
}
