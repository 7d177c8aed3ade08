//go:build image

package imagetest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// kubeManifests renders the shipped Secret, PVC and Deployment for podman
// kube play, changing only what a cluster would: the image is the one
// built, a recipient and the Secret's tokens are filled in and stored as data, as the API
// server stores stringData (podman reads data only; before 4.4 it also
// mounts data without decoding it, podman#16625, so rawData gives it the
// bytes themselves), and the port is published on loopback (a Service
// would front it).
func kubeManifests(t *testing.T, image string, port int, token, verdictToken string, rawData bool) (all, deployment []byte) {
	t.Helper()
	read := func(name string, into any) {
		b, err := os.ReadFile(filepath.Join("..", "..", "manifests", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.UnmarshalStrict(b, into); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var secret corev1.Secret
	var pvc corev1.PersistentVolumeClaim
	var deploy appsv1.Deployment
	read("secret.yaml", &secret)
	read("pvc.yaml", &pvc)
	read("deployment.yaml", &deploy)
	values := map[string]string{}
	for k, v := range secret.StringData {
		values[k] = v
	}
	values["token"], values["verdict-token"] = token, verdictToken
	secret.StringData = nil
	var secretDoc any = &secret
	if rawData {
		b, err := yaml.Marshal(&secret)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		m["data"], secretDoc = values, m
	} else {
		secret.Data = map[string][]byte{}
		for k, v := range values {
			secret.Data[k] = []byte(v)
		}
	}
	c := &deploy.Spec.Template.Spec.Containers[0]
	c.Image = image
	c.Ports[0].HostIP, c.Ports[0].HostPort = "127.0.0.1", int32(port)
	for i := range c.Env {
		switch c.Env[i].Name {
		case "FDN_MAIL_TO":
			c.Env[i].Value = "ops@example.com" // what an operator fills in
		case "POD_NAMESPACE":
			// podman kube play's pods have no namespace for the downward
			// API: the Deployment's, as Kubernetes would give it.
			c.Env[i].ValueFrom, c.Env[i].Value = nil, deploy.Namespace
		}
	}
	var out bytes.Buffer
	for _, obj := range []any{secretDoc, &pvc, &deploy} {
		b, err := yaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n")
		out.Write(b)
		deployment = b
	}
	return out.Bytes(), deployment
}

// TestKubePlay runs manifests/ (Secret, PVC, Deployment) with podman kube
// play: the sample rollout's verdict and mail, a stop of the pod (SIGTERM)
// with exit 0 within the grace period, and a new pod on the same volume
// that keeps the state.
func TestKubePlay(t *testing.T) {
	p := newPodman(t)
	raw := make([]byte, 16)
	_, _ = rand.Read(raw)
	token, verdictToken := hex.EncodeToString(raw[:8]), hex.EncodeToString(raw[8:])
	port := freePort(t)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	dir := t.TempDir()
	file, again := filepath.Join(dir, "flux-deploy-notifier.yaml"), filepath.Join(dir, "deployment.yaml")
	all, deployment := kubeManifests(t, p.image, port, token, verdictToken, p.before(4, 4))
	if err := os.WriteFile(file, all, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(again, deployment, 0o644); err != nil {
		t.Fatal(err)
	}
	const (
		pod       = "flux-deploy-notifier-pod-0"
		container = pod + "-flux-deploy-notifier"
		volume    = "flux-deploy-notifier-data"
	)
	cleanup := func() {
		_, _ = p.run("kube", "down", file)
		_, _ = p.run("volume", "rm", "--force", volume)
		_, _ = p.run("secret", "rm", "flux-deploy-notifier")
	}
	cleanup() // what an interrupted run left
	t.Cleanup(cleanup)
	p.must("kube", "play", file)
	p.ready(container, url)
	// The Deployment's securityContext, as podman applied it.
	if got := p.must("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}} {{.Config.User}} {{len .EffectiveCaps}}", container); got != "true 65532:65532 0" {
		t.Fatalf("read-only root, user, capabilities: %q, want \"true 65532:65532 0\"", got)
	}

	secrets := t.TempDir()
	for name, v := range map[string]string{"token": token, "verdict-token": verdictToken} {
		if err := os.WriteFile(filepath.Join(secrets, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	wait := p.sample(url, secrets)
	data := p.must("volume", "inspect", "--format", "{{.Mountpoint}}", volume)
	sent := p.mailsSent(data)

	start := time.Now()
	p.must("pod", "stop", "--time", "10", pod)
	took := time.Since(start)
	if code := p.must("inspect", "--format", "{{.State.ExitCode}}", container); code != "0" || took > 10*time.Second {
		logs, _ := p.run("logs", container)
		t.Fatalf("pod stopped in %s, exit code %s:\n%s", took, code, logs)
	}

	// A new pod on the same claim, as after a rollout of the Deployment:
	// the Secret and the claim exist already (podman 4.3 refuses to play a
	// claim whose volume exists).
	p.must("kube", "down", again)
	p.must("kube", "play", again)
	p.ready(container, url)
	wait()
	if again := mails(t, data); len(again) != len(sent) {
		t.Fatalf("mails after the new pod: %v, before %v", again, sent)
	}
}
