package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
)

// Replicas are instances of the service on one PostgreSQL database behind
// one address, as a Kubernetes Service puts them: notification-controller
// posts to the address, which passes each request to the next replica
// that is up.
type Replicas struct {
	URL     string // the address's
	MailTo  string
	Members []*Service
	mu      sync.Mutex
	down    map[*Service]bool
	next    int
}

// StartReplicas registers one instance of the service with
// notification-controller in namespace (its Provider posting to the
// address) and runs n replicas of it on the PostgreSQL database conn, with
// cluster access to that namespace. They mail <namespace>@e2e.test.
func StartReplicas(t testing.TB, c *clustertest.Cluster, bin, namespace, smtpAddr, conn string, n int) *Replicas {
	t.Helper()
	token := make([]byte, 24)
	_, _ = rand.Read(token)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(hex.EncodeToString(token)), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &Replicas{MailTo: namespace + "@e2e.test", down: map[*Service]bool{}}
	front := &http.Server{Handler: http.HandlerFunc(r.pass), ReadHeaderTimeout: 5 * time.Second}
	addr := "127.0.0.1:" + strconv.Itoa(c.FreePort(t))
	r.URL = "http://" + addr
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = front.Serve(ln) }()
	t.Cleanup(func() { front.Close() })
	for i := range n {
		listen := "127.0.0.1:" + strconv.Itoa(c.FreePort(t))
		args := []string{"serve", "--listen", listen, "--postgres", conn,
			"--hmac-token-file", tokenFile, "--default-cluster", Cluster,
			"--smtp-addr", smtpAddr, "--smtp-tls", "none", "--external-url", r.URL,
			"--log-format", "text", "--log-level", "debug", "--settle-after", "20s",
			"--lease-duration", "4s", "--lease-renew", "1s",
			"--kubeconfig", c.Kubeconfig, "--namespaces", namespace, "--mail-to", r.MailTo}
		s := &Service{URL: "http://" + listen, MailTo: r.MailTo, bin: bin, name: "replica-" + strconv.Itoa(i) + "-" + namespace, c: c, t: t, args: args}
		s.Start()
		r.Members = append(r.Members, s)
	}
	out, err := exec.Command(bin, "manifests", "--flux-namespace", namespace, "--url", r.URL+"/webhook", "--cluster", Cluster).Output()
	if err != nil {
		t.Fatalf("manifests: %v", err)
	}
	c.ApplyYAML(t, strings.Replace(string(out), "REPLACE-WITH-THE-TOKEN-OF-manifests/secret.yaml", hex.EncodeToString(token), 1))
	return r
}

// pass hands a request to the next replica that is up, round robin.
func (r *Replicas) pass(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	var up []*Service
	for _, s := range r.Members {
		if !r.down[s] {
			up = append(up, s)
		}
	}
	if len(up) == 0 {
		r.mu.Unlock()
		http.Error(w, "no replica", http.StatusServiceUnavailable)
		return
	}
	s := up[r.next%len(up)]
	r.next++
	r.mu.Unlock()
	to, _ := url.Parse(s.URL)
	httputil.NewSingleHostReverseProxy(to).ServeHTTP(w, req)
}

// Leader is the replica that leads now, or nil.
func (r *Replicas) Leader() *Service {
	for _, s := range r.Members {
		if r.isDown(s) {
			continue
		}
		resp, err := http.Get(s.URL + "/readyz")
		if err != nil {
			continue
		}
		var body struct {
			Role string `json:"role"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if body.Role == "leader" {
			return s
		}
	}
	return nil
}

// AwaitLeader waits for a replica to lead.
func (r *Replicas) AwaitLeader(t testing.TB, timeout time.Duration) *Service {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		if s := r.Leader(); s != nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica leads after %s", timeout)
		}
	}
}

// Kill kills a replica with SIGKILL and takes it out of the address, as
// Kubernetes does once its pod is gone.
func (r *Replicas) Kill(s *Service) {
	r.mu.Lock()
	r.down[s] = true
	r.mu.Unlock()
	s.Kill()
}

func (r *Replicas) isDown(s *Service) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down[s]
}

// Up are the replicas not killed.
func (r *Replicas) Up() []*Service {
	var out []*Service
	for _, s := range r.Members {
		if !r.isDown(s) {
			out = append(out, s)
		}
	}
	return out
}
