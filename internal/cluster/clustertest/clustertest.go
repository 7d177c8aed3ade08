// Package clustertest runs a real etcd and kube-apiserver on loopback, with
// the Flux CRDs installed, for the tests of the cluster reader. The
// binaries are built by `make testbin` into bin/ from their Go modules
// (tools/), and the CRDs copied into bin/crds from the Flux controllers'
// module zips.
package clustertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// Cluster is a running kube-apiserver.
type Cluster struct {
	// Config reaches the apiserver as an administrator (system:masters).
	Config *rest.Config
	// Kubeconfig is a kubeconfig file with the same credentials.
	Kubeconfig string
	// Dir holds the cluster's files and the logs of the processes started.
	Dir   string
	pki   pki
	apply applier
	ports *ports
	// The apiserver, to stop and start again on the same port and etcd.
	apiserver     *Process
	apiserverArgs []string
}

// CRDGroupVersionResource is the CRD resource.
var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// BinDir is the repository's bin directory, where make testbin puts the
// binaries and CRDs.
func BinDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "bin")
}

// Binary returns the path of a binary make testbin builds into bin/. With
// -short (make test-short, and make test's first phase, which runs while
// they build) the test is skipped; otherwise a missing binary fails it.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs bin/%s, which make testbin builds: not in -short", name)
	}
	path := filepath.Join(BinDir(), name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is missing: run `make testbin` (it builds the test binaries into bin/)", name)
	}
	return path
}

// Start runs etcd and kube-apiserver until the test ends, and installs the
// Flux CRDs.
func Start(t testing.TB) *Cluster {
	t.Helper()
	bin := BinDir()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		Binary(t, b)
	}
	dir := t.TempDir()
	// FDN_TEST_LOGS keeps the processes' logs (and etcd's data) after the
	// test, for a developer reading what the controllers did.
	if keep := os.Getenv("FDN_TEST_LOGS"); keep != "" {
		if err := os.MkdirAll(keep, 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if dir, err = os.MkdirTemp(keep, "cluster-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("logs in %s", dir)
	}
	pki := newPKI(t, dir)

	ports := newPorts()
	etcdClient, etcdPeer := ports.take(t), ports.take(t)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdClient)
	StartProcess(t, dir, "etcd", filepath.Join(bin, "etcd"), nil,
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--initial-cluster", "default=http://127.0.0.1:"+strconv.Itoa(etcdPeer),
		"--unsafe-no-fsync", "--log-level", "error")

	port := ports.take(t)
	args := []string{"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(port),
		"--cert-dir", filepath.Join(dir, "apiserver-certs"),
		"--client-ca-file", pki.caFile,
		"--service-account-issuer", "https://127.0.0.1",
		"--service-account-key-file", pki.saKeyFile,
		"--service-account-signing-key-file", pki.saKeyFile,
		"--service-cluster-ip-range", "10.96.0.0/24",
		// Loopback cannot be an endpoint of the kubernetes Service.
		"--endpoint-reconciler-type", "none",
		"--authorization-mode", "RBAC",
		"--enable-priority-and-fairness=false",
		"--disable-admission-plugins", "ServiceAccount"}
	apiserver := StartProcess(t, dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"), nil, args...)

	host := "https://127.0.0.1:" + strconv.Itoa(port)
	cfg := &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure: true, // the apiserver serves a certificate it generated itself
			CertData: pki.adminCert, KeyData: pki.adminKey,
		},
		QPS: 100, Burst: 200,
	}
	waitReady(t, cfg, apiserver)
	c := &Cluster{Config: cfg, Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), pki: pki, ports: ports,
		apiserver: apiserver, apiserverArgs: args}
	writeKubeconfig(t, c.Kubeconfig, host, pki.adminCert, pki.adminKey)
	installCRDs(t, cfg, "crds")
	return c
}

// StopAPIServer stops the kube-apiserver (etcd keeps the state), as an
// outage or an upgrade of the control plane does.
func (c *Cluster) StopAPIServer() { c.apiserver.Kill() }

// APIServerPID is the kube-apiserver's process id (for the benchmarks'
// accounting of its CPU time).
func (c *Cluster) APIServerPID() int { return c.apiserver.cmd.Process.Pid }

// StartAPIServer starts the kube-apiserver again, on the same port and
// etcd, and waits until it is ready.
func (c *Cluster) StartAPIServer(t testing.TB) {
	t.Helper()
	c.apiserver = StartProcess(t, c.Dir, "kube-apiserver", filepath.Join(BinDir(), "kube-apiserver"), nil, c.apiserverArgs...)
	waitReady(t, c.Config, c.apiserver)
}

func waitReady(t testing.TB, cfg *rest.Config, apiserver *Process) {
	t.Helper()
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apiserver.AwaitReady(t, &http.Client{Transport: rt, Timeout: 2 * time.Second}, cfg.Host+"/readyz", 90*time.Second)
}

// InstallCRDs creates the CRDs in bin/<dir> (a directory make testbin
// fills, such as crds/monitoring) and waits until they are served.
func (c *Cluster) InstallCRDs(t testing.TB, dir string) { installCRDs(t, c.Config, dir) }

// installCRDs creates the CRDs of the YAML files in bin/<dir> and waits
// until they are served: at Start, the Flux ones of bin/crds.
func installCRDs(t testing.TB, cfg *rest.Config, dir string) {
	t.Helper()
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(BinDir(), dir, "*.yaml"))
	if len(files) == 0 {
		t.Fatalf("no CRDs in bin/%s: run `make testbin`", dir)
	}
	ctx := context.Background()
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := ParseYAML(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, u := range objs {
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := dc.Resource(crdGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("create CRD %s: %v", u.GetName(), err)
			}
			names = append(names, u.GetName())
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range names {
		for {
			u, err := dc.Resource(crdGVR).Get(ctx, n, metav1.GetOptions{})
			if err == nil && established(u) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("CRD %s not established: %v", n, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func established(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

type pki struct {
	caFile, saKeyFile   string
	adminCert, adminKey []byte
	ca                  *x509.Certificate
	caKey               *ecdsa.PrivateKey
}

// KubeconfigFor writes a kubeconfig for a user with no group but those
// given: what RBAC grants it is all it can do.
func (c *Cluster) KubeconfigFor(t testing.TB, user string, groups ...string) string {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: user, Organization: groups},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.pki.ca, &key.PublicKey, c.pki.caKey)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.Dir, "kubeconfig-"+user)
	writeKubeconfig(t, path, c.Config.Host, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pemKey(t, key))
	return path
}

// ServiceAccountToken creates ServiceAccount name in namespace ns (and
// the namespace) and returns a token of it from the TokenRequest API, valid
// for an hour: unlike a certificate, it stops working when the
// ServiceAccount is deleted (401), as a revoked or expired token does.
func (c *Cluster) ServiceAccountToken(t testing.TB, ns, name string) string {
	t.Helper()
	c.ApplyYAML(t, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: %s, namespace: %s}\n", ns, name, ns))
	tr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"expirationSeconds": int64(3600)}}}
	got, err := dynamic.NewForConfigOrDie(c.Config).Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).
		Namespace(ns).Create(context.Background(), tr, metav1.CreateOptions{}, "token")
	if err != nil {
		t.Fatal(err)
	}
	token, _, _ := unstructured.NestedString(got.Object, "status", "token")
	if token == "" {
		t.Fatalf("no token for ServiceAccount %s/%s", ns, name)
	}
	return token
}

// ConfigWithToken reaches the apiserver with a bearer token alone.
func (c *Cluster) ConfigWithToken(token string) *rest.Config {
	return &rest.Config{Host: c.Config.Host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: c.Config.Insecure, CAData: c.Config.CAData}}
}

// newPKI makes a client CA, an administrator certificate signed by it, and
// the service-account signing key kube-apiserver requires.
func newPKI(t testing.TB, dir string) pki {
	t.Helper()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fdn-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	adminKey := newKey(t)
	adminTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	adminDER, err := x509.CreateCertificate(rand.Reader, adminTmpl, ca, &adminKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p := pki{
		caFile:    filepath.Join(dir, "ca.crt"),
		saKeyFile: filepath.Join(dir, "sa.key"),
		adminCert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: adminDER}),
		adminKey:  pemKey(t, adminKey),
		ca:        ca, caKey: caKey,
	}
	write(t, p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	write(t, p.saKeyFile, pemKey(t, newKey(t)))
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pemKey(t testing.TB, k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func write(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKubeconfig(t testing.TB, path, host string, cert, key []byte) {
	t.Helper()
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {client-certificate-data: %q, client-key-data: %q}
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`, host, b64(cert), b64(key))
	write(t, path, []byte(cfg))
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

var (
	clusterRoles        = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	clusterRoleBindings = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
)

// Grant grants subject exactly rules, cluster-wide: a ClusterRole named
// name, and its ClusterRoleBinding of the same name.
func (c *Cluster) Grant(t testing.TB, name string, rules []rbacv1.PolicyRule, subject rbacv1.Subject) {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := dynamic.NewForConfigOrDie(c.Config).Resource(clusterRoles).Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		c.create(t, clusterRoles, role)
	}
	c.create(t, clusterRoleBindings, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{subject}})
}

// Revoke deletes the ClusterRoleBinding Grant made: the ClusterRole stays,
// for Grant to bind again.
func (c *Cluster) Revoke(t testing.TB, name string) {
	t.Helper()
	if err := dynamic.NewForConfigOrDie(c.Config).Resource(clusterRoleBindings).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

var roleBindings = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}

// GrantIn grants subject rules in namespace alone: a ClusterRole named
// name, bound there by a RoleBinding of the same name.
func (c *Cluster) GrantIn(t testing.TB, namespace, name string, rules []rbacv1.PolicyRule, subject rbacv1.Subject) {
	t.Helper()
	if _, err := dynamic.NewForConfigOrDie(c.Config).Resource(clusterRoles).Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		c.create(t, clusterRoles, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules})
	}
	c.create(t, roleBindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{subject}})
}

// RevokeIn deletes the RoleBinding GrantIn made.
func (c *Cluster) RevokeIn(t testing.TB, namespace, name string) {
	t.Helper()
	if err := dynamic.NewForConfigOrDie(c.Config).Resource(roleBindings).Namespace(namespace).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) create(t testing.TB, gvr schema.GroupVersionResource, obj any) {
	t.Helper()
	m, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	if _, err := dynamic.NewForConfigOrDie(c.Config).Resource(gvr).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
