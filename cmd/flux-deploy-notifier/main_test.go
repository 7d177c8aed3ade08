package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	netmail "net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fixture"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
)

// lineWriter hands each line written to it to a channel, so a test can wait
// for the "listening on" line of run.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(line)
			return len(p), nil
		}
		select {
		case w.lines <- strings.TrimSpace(line):
		default:
		}
	}
}

// startServe runs the serve command in process and returns its base URL.
func startServe(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	stdout := &lineWriter{lines: make(chan string, 64)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	getenv := func(k string) string { return env[k] }
	go func() { done <- run(ctx, append([]string{"serve"}, args...), getenv, stdout, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-stdout.lines:
			if _, url, ok := strings.Cut(line, "listening on "); ok {
				return url
			}
		case err := <-done:
			done <- err
			t.Fatalf("serve exited before listening: %v", err)
		case <-timeout:
			t.Fatal("serve did not start listening")
		}
	}
}

func TestServeFlagsAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{name: "token required", args: []string{"--data-dir", dir}, wantErr: "--hmac-token-file is required"},
		{name: "token file missing", args: []string{"--data-dir", dir, "--hmac-token-file", filepath.Join(dir, "none")}, wantErr: "read token"},
		{name: "bad layers", args: []string{"--insecure-no-auth", "--layers", "apps"}, wantErr: "not namespace/name"},
		{name: "bad duration in env", env: map[string]string{"FDN_STUCK_AFTER": "soon"}, args: []string{"--insecure-no-auth"}, wantErr: "FDN_STUCK_AFTER"},
		{name: "negative stuck-after", args: []string{"--insecure-no-auth", "--stuck-after", "-1m"}, wantErr: "positive"},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "not defined"},
		{name: "a cluster in two environments", env: map[string]string{"FDN_ENVIRONMENTS": "staging=x;prod=x"}, args: []string{"--insecure-no-auth"}, wantErr: "--environments: cluster x is in staging and prod"},
		{name: "bad mail-to", args: []string{"--insecure-no-auth", "--mail-to", "ops@example.com,not an address"}, wantErr: "--mail-to"},
		{name: "smtp auth without password file", args: []string{"--insecure-no-auth", "--smtp-addr", "127.0.0.1:25", "--smtp-auth", "plain", "--smtp-username", "u"}, wantErr: "--smtp-password-file"},
		{name: "smtp password file missing", args: []string{"--insecure-no-auth", "--smtp-addr", "127.0.0.1:25", "--smtp-auth", "plain", "--smtp-username", "u", "--smtp-password-file", filepath.Join(dir, "none")}, wantErr: "read SMTP password"},
		{name: "bad smtp tls", args: []string{"--insecure-no-auth", "--data-dir", dir, "--smtp-addr", "127.0.0.1:25", "--smtp-tls", "maybe"}, wantErr: "smtp tls"},
		{name: "smtp addr without port", args: []string{"--insecure-no-auth", "--smtp-addr", "mail.example.com"}, wantErr: "--smtp-addr"},
		{name: "templates without the files", args: []string{"--insecure-no-auth", "--data-dir", dir, "--templates", dir}, wantErr: "parse text template"},
		{name: "bad forge repos", args: []string{"--insecure-no-auth", "--github-token-file", "t", "--forge-repos", "fleet=acme/fleet"}, wantErr: "not namespace/name=OWNER/REPO"},
		{name: "forge repos without forge", args: []string{"--insecure-no-auth", "--forge-repos", "flux-system/fleet=acme/fleet"}, wantErr: "need a forge's token file"},
		{name: "bad forge environments", args: []string{"--insecure-no-auth", "--github-token-file", "t", "--forge-environments", "prod"}, wantErr: "not cluster=environment"},
		{name: "github repo without token", args: []string{"--insecure-no-auth", "--github-repo", "acme/fleet"}, wantErr: "needs --github-token-file"},
		{name: "github repo malformed", args: []string{"--insecure-no-auth", "--github-token-file", "t", "--github-repo", "acme/x/fleet"}, wantErr: "want OWNER/REPO"},
		{name: "github token file missing", args: []string{"--insecure-no-auth", "--data-dir", dir, "--github-token-file", filepath.Join(dir, "none"), "--github-repo", "acme/fleet"}, wantErr: "github token"},
		{name: "github api url", args: []string{"--insecure-no-auth", "--data-dir", dir, "--github-token-file", "t", "--github-repo", "acme/fleet", "--github-api-url", "ftp://x"}, wantErr: "--github-api-url"},
		{name: "two forges", args: []string{"--insecure-no-auth", "--github-token-file", "t", "--github-repo", "acme/fleet", "--gitlab-token-file", "t", "--gitlab-project", "acme/fleet"}, wantErr: "not two"},
		{name: "github app half configured", args: []string{"--insecure-no-auth", "--github-app-id", "42"}, wantErr: "needs --github-app-id, --github-app-installation-id and --github-app-private-key-file"},
		{name: "github app and token", args: []string{"--insecure-no-auth", "--github-token-file", "t", "--github-app-id", "42", "--github-app-installation-id", "7", "--github-app-private-key-file", "k"}, wantErr: "not both"},
		{name: "gitea token without url", args: []string{"--insecure-no-auth", "--gitea-token-file", "t"}, wantErr: "needs --gitea-url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			err := run(context.Background(), append([]string{"serve"}, tt.args...), getenv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
	t.Run("environment configures serve", func(t *testing.T) {
		url := startServe(t, map[string]string{
			"FDN_LISTEN": "127.0.0.1:0", "FDN_DATA_DIR": t.TempDir(), "FDN_INSECURE_NO_AUTH": "true",
		})
		resp, err := http.Get(url + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("healthz: %v %v", resp, err)
		}
		resp.Body.Close()
	})
}

// TestGeneratedTokenAndSample is what a newcomer does: make run generates a
// token, make sample posts a rollout and shows its verdict.
func TestGeneratedTokenAndSample(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "dev-token")
	url := startServe(t, nil, "--listen", "127.0.0.1:0", "--data-dir", dir, "--hmac-token-file", tokenFile, "--generate-token",
		"--mail-to", "dev@localhost")
	tok, err := os.ReadFile(tokenFile)
	if err != nil || len(tok) < 32 {
		t.Fatalf("generated token %q: %v", tok, err)
	}
	// The series alerts take an increase of
	// (manifests/components/prometheusrule) exist at 0 before their first
	// event. Born at 1, the first failed rollout or rejected event after a
	// start would be no increase to Prometheus, and alert no one.
	checkMetrics(t, url, []string{
		`fdn_rollout_terminal_seconds_count{verdict="applied"} 0`,
		`fdn_rollout_terminal_seconds_count{verdict="failed"} 0`,
		`fdn_rollout_terminal_seconds_count{verdict="stuck"} 0`,
		`fdn_rollout_terminal_seconds_count{verdict="superseded"} 0`,
		`fdn_rollout_verdicts_total{verdict="failed"} 0`, `fdn_rollout_verdicts_total{verdict="stuck"} 0`,
		`fdn_events_received_total{kind="",reason="",result="rejected"} 0`,
		`fdn_store_commit_failures_total 0`, `fdn_mails_dead_lettered_total 0`, `fdn_mails_stuck 0`,
	})
	// A minute apart: rollouts within the same seconds would order by hash.
	start := time.Now().UTC().Add(-5 * time.Minute)
	for i, s := range []struct{ scenario, want string }{{"clean", `"verdict": "applied"`}, {"prune-failed", `"verdict": "failed"`}} {
		scenario, want := s.scenario, s.want
		var out bytes.Buffer
		err := run(context.Background(), []string{"sample", "--url", url, "--token-file", tokenFile, "--scenario", scenario,
			"--start", start.Add(time.Duration(i) * time.Minute).Format(time.RFC3339)}, func(string) string { return "" }, &out, io.Discard)
		if err != nil {
			t.Fatalf("sample %s: %v", scenario, err)
		}
		if !strings.Contains(out.String(), want) {
			t.Fatalf("sample %s printed:\n%s", scenario, out.String())
		}
	}
	// Both rollouts are mailed, as .eml files: applying and applied, then
	// applying and prune failed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		files, _ := filepath.Glob(filepath.Join(dir, "mail", "*.eml"))
		if len(files) == 4 {
			var subjects []string
			for _, f := range files {
				b, _ := os.ReadFile(f)
				m, err := netmail.ReadMessage(bytes.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				subjects = append(subjects, m.Header.Get("Subject"))
			}
			if joined := strings.Join(subjects, "\n"); !strings.Contains(joined, "prune failed on dev: ConfigMap apps/old-config") {
				t.Fatalf("mails:\n%s", joined)
			}
			checkMetrics(t, url, []string{
				`fdn_rollouts{verdict="applied"} 1`, `fdn_rollouts{verdict="failed"} 1`,
				`fdn_rollout_terminal_seconds_count{verdict="applied"} 1`,
				`fdn_rollout_terminal_seconds_count{verdict="failed"} 1`, `fdn_rollout_verdicts_total{verdict="failed"} 1`,
				`fdn_outbox_depth 0`, `fdn_mails_sent_total 4`, `fdn_webhook_duration_seconds_count 21`,
				`fdn_events_received_total{kind="Kustomization",reason="PruneFailed",result="stored"} 1`,
			})
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d .eml files, want 4", len(files))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFixturesOverHTTP replays every captured request through the real
// HTTP stack, signed as notification-controller signs them, and checks the
// verdicts pipelines would read against what really happened.
func TestFixturesOverHTTP(t *testing.T) {
	dir := t.TempDir()
	token := []byte("fixture-token\n")
	// The captures are from earlier today: a long deadline keeps the
	// rollout that ended suspended from turning stuck by the wall clock.
	url := startServe(t, nil, append([]string{"--listen", "127.0.0.1:0"}, serviceArgs(t, dir, token)...)...)
	labels := map[string]string{}
	for _, name := range fixture.Scenarios {
		reqs, err := fixture.Received(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			req, _ := http.NewRequest(http.MethodPost, url+"/webhook", strings.NewReader(r.Body))
			for _, h := range []string{"Content-Type", "Gotk-Component", "User-Agent"} {
				req.Header.Set(h, strings.Join(r.Headers[h], ","))
			}
			req.Header.Set("X-Signature", signature.Sign(token, []byte(r.Body)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("%s seq %d: status %d", name, r.Seq, resp.StatusCode)
			}
		}
		m, err := fixture.ReadMeta(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Published {
			labels[p.Label] = p.Revision
		}
	}
	want := map[string]string{
		"R0": "applied", "R1": "applied", "R2": "failed", "R3": "failed", "R4": "failed",
		"R5": "failed", "R6": "applied", "R7": "applied", "R8": "applied",
	}
	check := func(from string) {
		t.Helper()
		for label, verdict := range want {
			rev, _ := flux.ParseRevision(labels[label])
			resp, err := http.Get(url + "/verdict?rev=" + rev.Hash[:9])
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Verdict      string  `json:"verdict"`
				SupersededBy *string `json:"superseded_by"`
				Failures     []struct {
					Layer   string `json:"layer"`
					Objects []struct{ Kind, Namespace, Name string }
				} `json:"failures"`
			}
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil || v.Verdict != verdict {
				t.Errorf("%s (%s): verdict %q (%v), want %s", label, from, v.Verdict, err, verdict)
			}
			switch label {
			case "R2":
				if len(v.Failures) != 1 || v.Failures[0].Layer != "flux-system/apps" || len(v.Failures[0].Objects) != 1 ||
					fmt.Sprint(v.Failures[0].Objects[0]) != "{ConfigMap acc-apps app-protected}" {
					t.Errorf("R2 failures %+v", v.Failures)
				}
			case "R4":
				if v.SupersededBy == nil || *v.SupersededBy != labels["R5"] {
					t.Errorf("R4 superseded_by %v, want %s", v.SupersededBy, labels["R5"])
				}
			}
		}
	}
	check("live")
	// The captures are a day old, so their rollouts settle at the next pass
	// (every 10 s): the same verdicts must then come from the archive.
	deadline := time.Now().Add(30 * time.Second)
	for settledTotal(t, url) < 5 {
		if time.Now().After(deadline) {
			t.Fatal("no rollout settled within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	check("settled")
}

// settledTotal reads fdn_rollouts_settled_total.
func settledTotal(t *testing.T, url string) float64 {
	t.Helper()
	f, _ := strconv.ParseFloat(metric(t, url, "fdn_rollouts_settled_total"), 64)
	return f
}

func readListening(t testing.TB, r io.Reader) string {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if _, url, ok := strings.Cut(sc.Text(), "listening on "); ok {
			go func() { _, _ = io.Copy(io.Discard, r) }()
			return url
		}
	}
	t.Fatalf("child exited before listening: %v", sc.Err())
	return ""
}

// checkMetrics polls /metrics until it has every line of want.
func checkMetrics(t *testing.T, url string, want []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := string(b)
		missing := ""
		for _, line := range want {
			if !strings.Contains(text, line+"\n") {
				missing = line
				break
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			var fdn []string
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, "fdn_") {
					fdn = append(fdn, l)
				}
			}
			t.Fatalf("/metrics lacks %q:\n%s", missing, strings.Join(fdn, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRootsInsideTheBinary: with no root certificates on the system (as in
// an image FROM scratch), TLS still has roots to verify against: the ones
// compiled in.
func TestRootsInsideTheBinary(t *testing.T) {
	if os.Getenv("FDN_TEST_NO_SYSTEM_ROOTS") == "1" {
		pool, err := x509.SystemCertPool()
		//lint:ignore SA1019 counting the roots is all this needs
		if err != nil || len(pool.Subjects()) < 100 {
			fmt.Printf("roots: %v\n", err)
			os.Exit(1)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRootsInsideTheBinary$")
	empty := t.TempDir()
	cmd.Env = append(os.Environ(), "FDN_TEST_NO_SYSTEM_ROOTS=1", "SSL_CERT_FILE="+filepath.Join(empty, "none.pem"), "SSL_CERT_DIR="+empty)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("no roots without the system's: %v\n%s", err, out)
	}
}

// TestHelpExitsZero: asking for the flags is not a failure, whatever the
// command. A script that runs `wait -h` to check its flags, or a shell with
// `set -e`, would otherwise stop on it (wait said "flag: help requested"
// and exited 3, its code for trouble).
func TestHelpExitsZero(t *testing.T) {
	bin := buildBinary(t, false)
	for _, args := range [][]string{{"-h"}, {"help"}, {"serve", "-h"}, {"sample", "-h"}, {"wait", "-h"}, {"wait", "--help"}, {"manifests", "-h"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{} // the FDN_* variables of the machine running the test stay out
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%v: %v\n%s", args, err, out)
			continue
		}
		if !strings.Contains(string(out), "  -") && !strings.Contains(string(out), "Usage:") {
			t.Errorf("%v printed no usage:\n%s", args, out)
		}
		if strings.Contains(string(out), "help requested") {
			t.Errorf("%v called help an error:\n%s", args, out)
		}
	}
	// And a wrong flag is still a usage error.
	if err := exec.Command(bin, "wait", "--no-such-flag").Run(); err == nil {
		t.Error("wait --no-such-flag exited 0")
	} else if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != int(exitTrouble) {
		t.Errorf("wait --no-such-flag: %v, want exit %d", err, exitTrouble)
	}
}

// exitOf is the code a command's error exits the process with.
func exitOf(err error) int {
	var c exitCode
	if errors.As(err, &c) {
		return int(c)
	}
	return 0
}
