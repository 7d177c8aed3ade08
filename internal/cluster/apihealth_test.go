package cluster_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/syncbuf"
)

// TestAPIFailureWarns stops the real kube-apiserver under a synced
// reader: reading the cluster fails, which Warning says until, the
// apiserver back, the informers read again; the log says each once.
func TestAPIFailureWarns(t *testing.T) {
	c := clustertest.Start(t)
	te := startEngine(t, t.TempDir(), time.Now())
	var logs syncbuf.Buffer
	r, err := cluster.NewForConfig(c.Config, te, cluster.Config{Cluster: "prod"}, slog.New(slog.NewTextHandler(&logs, nil)), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	runReader(t, r)
	waitFor(t, "caches to sync", r.Synced)
	if w := r.Warning(); w != "" {
		t.Fatalf("warning while the apiserver runs: %q", w)
	}

	c.StopAPIServer()
	waitFor(t, "a warning that reading the cluster fails", func() bool { return strings.Contains(r.Warning(), "reading the cluster fails since") })
	c.StartAPIServer(t)
	// The recovery is logged just after the episode ends, which clears the
	// warning: wait for both.
	waitFor(t, "the warning to clear and the recovery logged", func() bool {
		return r.Warning() == "" && strings.Contains(logs.String(), "reading the cluster again")
	})
	if n, m := strings.Count(logs.String(), "reading the cluster fails"), strings.Count(logs.String(), "reading the cluster again"); n != 1 || m != 1 {
		t.Fatalf("failure logged %d times, recovery %d, want once each:\n%s", n, m, logs.String())
	}
}
