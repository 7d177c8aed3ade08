package clusters

import (
	"strings"
	"testing"
)

const secretInside = "s3cr3t-t0ken-XYZ"

func kubeconfig(cluster, user string) string {
	return `apiVersion: v1
kind: Config
clusters:
- name: remote
  cluster: {server: "https://127.0.0.1:6443", ` + cluster + `}
users:
- name: hub
  user: {` + user + `}
contexts:
- name: remote
  context: {cluster: remote, user: hub}
current-context: remote
`
}

// TestKubeconfigRules: a registered cluster's kubeconfig is read from
// value, else value.yaml; one that would run a program or read the
// service's files is refused; and no error quotes the Secret, whatever
// the parser saw.
func TestKubeconfigRules(t *testing.T) {
	token := `token: "` + secretInside + `"`
	for _, tc := range []struct {
		name string
		data map[string][]byte
		err  string // "" when read
	}{
		{"value", map[string][]byte{"value": []byte(kubeconfig("insecure-skip-tls-verify: true", token))}, ""},
		{"value.yaml", map[string][]byte{"value.yaml": []byte(kubeconfig("insecure-skip-tls-verify: true", token))}, ""},
		{"neither key", map[string][]byte{"kubeconfig": []byte(kubeconfig("", token))}, "no kubeconfig under the key value or value.yaml"},
		{"not YAML", map[string][]byte{"value": []byte("clusters: [" + secretInside)}, "the kubeconfig does not parse"},
		{"exec plugin", map[string][]byte{"value": []byte(kubeconfig("", `exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ["-c", "`+secretInside+`"]}`))}, "exec credential plugin"},
		{"auth provider", map[string][]byte{"value": []byte(kubeconfig("", `auth-provider: {name: oidc, config: {id-token: `+secretInside+`}}`))}, "auth provider"},
		{"CA file", map[string][]byte{"value": []byte(kubeconfig("certificate-authority: /etc/"+secretInside, token))}, "certificate authority file"},
		{"client certificate file", map[string][]byte{"value": []byte(kubeconfig("", "client-certificate: /etc/"+secretInside+", client-key: /etc/key"))}, "client certificate or key file"},
		{"token file", map[string][]byte{"value": []byte(kubeconfig("", "tokenFile: /var/run/"+secretInside))}, "token file"},
		{"no server", map[string][]byte{"value": []byte(strings.Replace(kubeconfig("", token), `server: "https://127.0.0.1:6443", `, "", 1))}, "names no cluster with a server"},
		// Two contexts, and the current one is not among them: which to
		// use is not said.
		{"no current context", map[string][]byte{"value": []byte(strings.Replace(kubeconfig("", token), "current-context: remote",
			"- name: second\n  context: {cluster: remote, user: hub}\ncurrent-context: gone", 1))}, "no current context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, sum, err := restConfig(tc.data)
			if tc.err == "" {
				if err != nil || cfg == nil || cfg.BearerToken != secretInside || cfg.Host != "https://127.0.0.1:6443" {
					t.Fatalf("read %+v, %v", cfg, err)
				}
				if sum == [32]byte{} {
					t.Fatal("no fingerprint of the kubeconfig")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			}
			if strings.Contains(err.Error(), secretInside) {
				t.Fatalf("the error quotes the Secret: %v", err)
			}
		})
	}
}
