package e2e

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Cluster is the cluster name the Alerts send as eventMetadata.
const Cluster = "e2e"

// BuildService builds the service's binary into dir, with the race
// detector.
func BuildService(dir string) (string, error) {
	bin := filepath.Join(dir, "flux-deploy-notifier")
	// With the race detector: the real scenarios exercise it too. With
	// fdn_verify, every view is checked against a full evaluation after
	// every batch.
	cmd := exec.Command("go", "build", "-race", "-tags", "fdn_verify", "-o", bin, "./cmd/flux-deploy-notifier")
	cmd.Dir = filepath.Join(clustertest.BinDir(), "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Service is flux-deploy-notifier running as its own process, reading one
// namespace of the cluster and mailing MailTo through an SMTP server. It
// keeps its port and data across restarts.
type Service struct {
	URL    string
	MailTo string
	bin    string
	name   string
	c      *clustertest.Cluster
	args   []string
	proc   *clustertest.Process
	t      testing.TB
}

// Options change how an instance of the service runs.
type Options struct {
	// EventsOnly runs it without cluster access (--cluster=off), expecting
	// Layers (namespace/name) on every rollout (--layers): what a team
	// that gives the service no access to the cluster configures; without
	// Layers, it infers them from events alone. Its Provider, Alert and
	// Secret are named flux-deploy-notifier-events.
	EventsOnly bool
	Layers     []string
	// StuckAfter is --stuck-after; zero keeps the default (30m).
	StuckAfter time.Duration
	// ReleaseNamespaces are the namespaces whose HelmReleases the Alert
	// sends (manifests --helmrelease-namespaces; none: the scenario's) and,
	// with cluster access, that the service reads too.
	ReleaseNamespaces []string
	// SilentReleases keeps them out of the Alert all the same: it sends
	// the HelmReleases of the scenario's namespace, which holds none, as
	// if helm-controller's events never reached notification-controller.
	SilentReleases bool
	// GitHubURL, when set, shows the verdicts as deployments in the
	// contract server there, with the token in GitHubTokenFile: in the
	// repository the rollout's GitRepository names, else in GitHub
	// (OWNER/REPO, --github-repo).
	GitHub, GitHubURL, GitHubTokenFile string
	// SlackURL, when set, shows the verdicts in the Slack stand-in there
	// (slacktest), in SlackChannel, with the token in SlackTokenFile.
	SlackURL, SlackChannel, SlackTokenFile string
	// Cluster is the name its Alert gives the cluster and its
	// --default-cluster; empty: Cluster.
	Cluster string
	// Args are more of serve's flags.
	Args []string
}

// Registration is the name of the Secret, Provider and Alert of an
// instance.
func (o Options) Registration() string {
	if o.EventsOnly {
		return "flux-deploy-notifier-events"
	}
	return "flux-deploy-notifier"
}

// StartService registers an instance of the service with
// notification-controller in namespace, with the Provider, Alert and Secret
// its `manifests` command writes, and starts it. With cluster access it
// reads only that namespace. It mails <namespace>@e2e.test, or
// <namespace>-events@e2e.test when events only.
func StartService(t testing.TB, c *clustertest.Cluster, bin, namespace, smtpAddr string, opts Options) *Service {
	t.Helper()
	dir := t.TempDir()
	token := make([]byte, 24)
	_, _ = rand.Read(token)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(hex.EncodeToString(token)), 0o600); err != nil {
		t.Fatal(err)
	}
	const settleAfter = 20 * time.Second
	listen := "127.0.0.1:" + strconv.Itoa(c.FreePort(t))
	name := opts.Registration() + "-" + namespace
	mailTo := namespace + "@e2e.test"
	cluster := cmp.Or(opts.Cluster, Cluster)
	args := []string{"serve", "--listen", listen, "--data-dir", filepath.Join(dir, "data"),
		"--hmac-token-file", tokenFile, "--default-cluster", cluster,
		"--smtp-addr", smtpAddr, "--smtp-tls", "none", "--external-url", "http://" + listen,
		"--log-format", "text", "--log-level", "debug",
		// Settle rollouts within the scenarios, so that the verdicts and
		// mails checked are those of a service that moves final rollouts to
		// its archive as real Flux goes on; longer than notification-
		// controller's retries (15 s), as the default is.
		"--settle-after", settleAfter.String()}
	if opts.StuckAfter > 0 {
		args = append(args, "--stuck-after", opts.StuckAfter.String())
	}
	if opts.GitHubURL != "" {
		args = append(args, "--github-api-url", opts.GitHubURL, "--github-token-file", opts.GitHubTokenFile)
	}
	if opts.GitHub != "" {
		args = append(args, "--github-repo", opts.GitHub)
	}
	if opts.SlackURL != "" {
		args = append(args, "--slack-api-url", opts.SlackURL, "--slack-token-file", opts.SlackTokenFile, "--slack-channel", opts.SlackChannel)
	}
	if opts.EventsOnly {
		mailTo = namespace + "-events@e2e.test"
		args = append(args, "--cluster=off")
		if len(opts.Layers) > 0 {
			args = append(args, "--layers", strings.Join(opts.Layers, ","))
		}
	} else {
		args = append(args, "--kubeconfig", c.Kubeconfig, "--namespaces", strings.Join(append([]string{namespace}, opts.ReleaseNamespaces...), ","))
	}
	s := &Service{URL: "http://" + listen, MailTo: mailTo, bin: bin, name: name, c: c, t: t,
		args: append(append(args, "--mail-to", mailTo), opts.Args...)}
	alerted := opts.ReleaseNamespaces
	if opts.SilentReleases {
		alerted = nil
	}
	out, err := exec.Command(bin, "manifests", "--flux-namespace", namespace,
		"--url", s.URL+"/webhook", "--cluster", cluster, "--helmrelease-namespaces", strings.Join(alerted, ",")).Output()
	if err != nil {
		t.Fatalf("manifests: %v", err)
	}
	docs := strings.Replace(string(out), "REPLACE-WITH-THE-TOKEN-OF-manifests/secret.yaml", hex.EncodeToString(token), 1)
	// Secret, Provider and Alert, and the references between them.
	docs = strings.ReplaceAll(docs, "name: flux-deploy-notifier\n", "name: "+opts.Registration()+"\n")
	c.ApplyYAML(t, docs)
	s.Start()
	return s
}

// Start runs the service and waits until it is ready (its caches synced).
func (s *Service) Start() {
	s.t.Helper()
	s.proc = clustertest.StartProcess(s.t, s.c.Dir, s.name, s.bin, nil, s.args...)
	s.proc.AwaitReady(s.t, &http.Client{Timeout: 2 * time.Second}, s.URL+"/readyz", time.Minute)
}

// Stop shuts the service down with SIGTERM, as Kubernetes does.
func (s *Service) Stop() {
	if !s.proc.Stop(30 * time.Second) {
		s.t.Errorf("%s did not stop within 30s of SIGTERM", s.name)
	}
}

// Kill stops the service with SIGKILL.
func (s *Service) Kill() { s.proc.Kill() }

// Verdict is the service's answer for a commit, or nil when it has none
// (unknown).
func (s *Service) Verdict(hash string) (*rollout.View, error) { return s.VerdictOn("", hash) }

// VerdictOn is Verdict on cluster ("" its default one).
func (s *Service) VerdictOn(cluster, hash string) (*rollout.View, error) {
	q := url.Values{"rev": {hash}}
	if cluster != "" {
		q.Set("cluster", cluster)
	}
	resp, err := http.Get(s.URL + "/verdict?" + q.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET /verdict: %s: %s", resp.Status, b)
	}
	var v rollout.View
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, err
	}
	return &v, nil
}

// AwaitVerdict polls the verdict until it is want, up to timeout, and
// returns it; any other terminal verdict fails the test at once.
func (s *Service) AwaitVerdict(t testing.TB, c Commit, want rollout.Verdict, timeout time.Duration) *rollout.View {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last *rollout.View
	for {
		v, err := s.Verdict(c.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if v != nil {
			last = v
			if v.Verdict == want {
				return v
			}
			if v.Verdict.Terminal() {
				t.Fatalf("%s: verdict %s, want %s\n%s", c.Hash[:7], v.Verdict, want, dump(v))
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s verdict after %v; last: %s", c.Hash[:7], want, timeout, dump(last))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// Wait runs the `wait` command a pipeline runs and returns its exit code
// and output; the error is for a command that could not run.
func (s *Service) Wait(c Commit, extra ...string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin, append([]string{"wait", "--url", s.URL, "--rev", c.Hash, "--timeout", "4m"}, extra...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out), nil
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out), nil
	default:
		return -1, string(out), fmt.Errorf("wait: %w", err)
	}
}

// OutboxEmpty reports whether the service has no mail waiting.
func (s *Service) OutboxEmpty() (bool, error) {
	n, found, err := s.metric("fdn_outbox_depth ")
	if err == nil && found == 0 {
		err = errors.New("no fdn_outbox_depth in /metrics")
	}
	return n == 0, err
}

// Received counts the events about Kustomizations the service stored since
// it started, or only those with reason when given.
func (s *Service) Received(reason string) (int, error) {
	series := `fdn_events_received_total{kind="Kustomization",`
	if reason != "" {
		series += `reason="` + reason + `",`
	}
	n, _, err := s.metric(series)
	return int(n), err
}

// ReceivedFrom counts the events of one kind the service received.
func (s *Service) ReceivedFrom(kind string) (int, error) {
	n, _, err := s.metric(`fdn_events_received_total{kind="` + kind + `",`)
	return int(n), err
}

// metric sums the samples of /metrics whose line starts with series, and
// counts them.
func (s *Service) metric(series string) (float64, int, error) {
	resp, err := http.Get(s.URL + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var sum float64
	var found int
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, series) {
			continue
		}
		n, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		sum, found = sum+n, found+1
	}
	return sum, found, sc.Err()
}

func dump(v *rollout.View) string {
	if v == nil {
		return "none"
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}
