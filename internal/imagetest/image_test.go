//go:build image

// Package imagetest runs the service's container image for real (podman
// with runc) the way manifests/deployment.yaml runs it: read-only root
// filesystem, user 65532, every capability dropped, the data dir a volume,
// the tokens mounted files. make image-test builds the image and runs it.
package imagetest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

type podman struct {
	t          *testing.T
	bin, runc  string
	conf       string // a containers.conf that sets no rlimits
	image      string
	hostBinary string // the same binary, run on the host as a pipeline would
}

func newPodman(t *testing.T) *podman {
	p := &podman{t: t, image: os.Getenv("FDN_IMAGE"), hostBinary: os.Getenv("FDN_IMAGE_BINARY")}
	if p.image == "" || p.hostBinary == "" {
		t.Fatal("FDN_IMAGE and FDN_IMAGE_BINARY are unset: run make image-test")
	}
	var err error
	if p.bin, err = exec.LookPath("podman"); err != nil {
		t.Fatal("podman is not installed: run make image-test")
	}
	if p.runc, err = exec.LookPath("runc"); err != nil {
		t.Fatal("runc is not installed: run make image-test")
	}
	// This sandbox permits no setrlimit, not even lowering one: the
	// container must inherit the host's (--ulimit host) and podman must
	// add none of its defaults (Debian's podman sets nproc).
	p.conf = filepath.Join(t.TempDir(), "containers.conf")
	if err := os.WriteFile(p.conf, []byte("[containers]\ndefault_ulimits = []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs podman with runc (crun cannot set rlimits in this sandbox).
func (p *podman) run(args ...string) (string, error) {
	cmd := exec.Command(p.bin, append([]string{"--runtime", p.runc}, args...)...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+p.conf)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (p *podman) must(args ...string) string {
	p.t.Helper()
	out, err := p.run(args...)
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// before tells whether podman is older than major.minor.
func (p *podman) before(major, minor int) bool {
	p.t.Helper()
	v := p.must("version", "--format", "{{.Client.Version}}")
	var ma, mi int
	if _, err := fmt.Sscanf(v, "%d.%d", &ma, &mi); err != nil {
		p.t.Fatalf("podman version %q: %v", v, err)
	}
	return ma < major || ma == major && mi < minor
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ready polls /readyz until 200; a container that exits fails the test
// with its log.
func (p *podman) ready(name, url string) {
	p.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if state, _ := p.run("inspect", "--format", "{{.State.Status}}", name); state != "running" || time.Now().After(deadline) {
			logs, _ := p.run("logs", name)
			p.t.Fatalf("container %s is %s, not ready:\n%s", name, state, logs)
		}
	}
}

// sample posts the sample rollout to url, signed with the token in
// secrets/token, and returns a check that its verdict is applied, asked as
// a pipeline asks: wait with the verdict token.
func (p *podman) sample(url, secrets string) (applied func()) {
	t := p.t
	t.Helper()
	out, err := exec.Command(p.hostBinary, "sample", "--url", url, "--token-file", filepath.Join(secrets, "token"), "--cluster", "prod").CombinedOutput()
	if err != nil {
		t.Fatalf("sample: %v\n%s", err, out)
	}
	rev := ""
	if _, after, ok := strings.Cut(string(out), "rollout of "); ok {
		rev, _, _ = strings.Cut(after, "\n")
	}
	if rev == "" {
		t.Fatalf("no revision in the sample's output:\n%s", out)
	}
	applied = func() {
		t.Helper()
		out, err := exec.Command(p.hostBinary, "wait", "--url", url, "--rev", rev, "--cluster", "prod",
			"--token-file", filepath.Join(secrets, "verdict-token"), "--timeout", "30s", "--no-ancestry").CombinedOutput()
		if err != nil || !strings.Contains(string(out), rev+" on prod: applied") {
			t.Fatalf("wait: %v\n%s", err, out)
		}
	}
	applied()
	return applied
}

// mailsSent waits for the sample's two mails (applying, applied) in the
// data dir's mail directory.
func (p *podman) mailsSent(data string) []string {
	t := p.t
	t.Helper()
	var sent []string
	for deadline := time.Now().Add(20 * time.Second); len(sent) < 2; time.Sleep(100 * time.Millisecond) {
		if sent = mails(t, data); time.Now().After(deadline) {
			t.Fatalf("mails in the data volume: %v", sent)
		}
	}
	return sent
}

func mails(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "mail", "*.eml"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestImage: the sample rollout's verdict and mail from the container,
// SIGTERM within the grace period with exit 0, and a restart that keeps
// the state.
func TestImage(t *testing.T) {
	p := newPodman(t)
	size := p.must("image", "inspect", "--format", "{{.Size}}", p.image)
	t.Logf("image %s: %s bytes", p.image, size)

	// The volume and the Secret as the kubelet mounts them: the data dir
	// writable by the pod's fsGroup, the secret files read-only.
	root := t.TempDir()
	data, secrets := filepath.Join(root, "data"), filepath.Join(root, "secrets")
	for _, d := range []string{data, secrets} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(data, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	token, verdictToken := hex.EncodeToString(raw[:8]), hex.EncodeToString(raw[8:])
	for name, v := range map[string]string{"token": token, "verdict-token": verdictToken} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	port := freePort(t)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	name := "fdn-image-test-" + hex.EncodeToString(raw[:4])
	t.Cleanup(func() { _, _ = p.run("rm", "--force", "--time", "0", name) })
	p.must("run", "--detach", "--name", name, "--ulimit", "host", "--network", "host",
		"--read-only", "--user", "65532:65532", "--cap-drop", "all", "--security-opt", "no-new-privileges",
		"--volume", data+":/data", "--volume", secrets+":/etc/flux-deploy-notifier:ro",
		"--env", "GOMEMLIMIT=192MiB", "--env", "FDN_DEFAULT_CLUSTER=prod", "--env", "FDN_MAIL_TO=ops@example.com",
		p.image, "serve", "--listen=127.0.0.1:"+strconv.Itoa(port), "--data-dir=/data",
		"--hmac-token-file=/etc/flux-deploy-notifier/token", "--verdict-token-file=/etc/flux-deploy-notifier/verdict-token")
	p.ready(name, url)
	if got := p.must("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}} {{.Config.User}} {{len .EffectiveCaps}}", name); got != "true 65532:65532 0" {
		t.Fatalf("read-only root, user, capabilities: %q, want \"true 65532:65532 0\"", got)
	}

	wait := p.sample(url, secrets)
	sent := p.mailsSent(data)

	// SIGTERM, as the kubelet stops a pod: exit 0 well within the grace.
	start := time.Now()
	p.must("stop", "--time", "10", name)
	took := time.Since(start)
	if code := p.must("inspect", "--format", "{{.State.ExitCode}}", name); code != "0" || took > 10*time.Second {
		logs, _ := p.run("logs", name)
		t.Fatalf("stopped in %s with exit code %s:\n%s", took, code, logs)
	}
	if logs, _ := p.run("logs", name); !strings.Contains(logs, `"msg":"stopped"`) {
		t.Fatalf("no clean stop in the log:\n%s", logs)
	}
	t.Logf("SIGTERM to exit: %s", took.Round(time.Millisecond))

	// A restart keeps the state: the verdict, and no mail again.
	p.must("start", name)
	p.ready(name, url)
	wait()
	if again := mails(t, data); len(again) != len(sent) {
		t.Fatalf("mails after the restart: %v, before %v", again, sent)
	}
}
