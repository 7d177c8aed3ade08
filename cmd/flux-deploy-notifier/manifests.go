package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	notifyv1 "github.com/fluxcd/notification-controller/api/v1"
	notifyv1beta3 "github.com/fluxcd/notification-controller/api/v1beta3"
	"github.com/fluxcd/pkg/apis/meta"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	clusterpkg "github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/clusters"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// tokenPlaceholder marks where the token goes; the same value must be in
// the service's Secret (manifests/secret.yaml).
const tokenPlaceholder = "REPLACE-WITH-THE-TOKEN-OF-manifests/secret.yaml"

// manifests prints what registers the service with notification-controller:
// the Secret holding the HMAC token, a generic-hmac Provider and an Alert
// sending every Kustomization, source and HelmRelease event at severity
// info. They are
// built from notification-controller's own API types, so the YAML cannot
// drift from Flux's API; manifests/flux.yaml is this output.
func manifests(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("manifests", getenv, stderr)
	ns := f.String("namespace", "FDN_NAMESPACE", "flux-deploy-notifier", "namespace the service runs in")
	fluxNS := f.String("flux-namespace", "FDN_FLUX_NAMESPACE", "flux-system", "namespace of the Provider, the Alert and their Secret")
	url := f.String("url", "FDN_URL", "", "webhook address (default http://flux-deploy-notifier.<namespace>.svc.cluster.local:8080/webhook)")
	cluster := f.String("cluster", "FDN_MANIFESTS_CLUSTER", "default", "cluster name sent as eventMetadata.cluster")
	releases := f.String("helmrelease-namespaces", "FDN_HELMRELEASE_NAMESPACES", "",
		"comma list of the namespaces whose HelmReleases the Alert sends (default the flux namespace; an Alert has no namespace wildcard)")
	reader := f.Bool("reader", "FDN_MANIFESTS_READER", false,
		"also print what a hub needs on this cluster to read it: a ServiceAccount in --namespace, the reader's ClusterRole bound to it, and a Secret holding its token")
	register := f.String("register", "FDN_REGISTER", "",
		"print instead the Secret registering cluster NAME with a hub (apply it on the hub, in --namespace); needs --server and --token-file")
	reg := registration{
		server:      f.String("server", "FDN_SERVER", "", "with --register: the cluster's API server URL"),
		tokenFile:   f.String("token-file", "FDN_TOKEN_FILE", "", "with --register: file holding the token of the ServiceAccount --reader made"),
		caFile:      f.String("ca-file", "FDN_CA_FILE", "", "with --register: file holding the API server's certificate authority (PEM; default the system's)"),
		environment: f.String("environment", "FDN_ENVIRONMENT", "", "with --register: the cluster's environment"),
	}
	if err := f.parse(args); err != nil {
		return err
	}
	if *register != "" {
		return reg.print(*register, *ns, stdout)
	}
	// Every kind of flux's table the Alert sends (a source's event is the
	// earliest sign of its revision), the releases' in the namespaces
	// named: an Alert has no namespace wildcard, and a HelmRelease lives
	// in its application's.
	releaseNS := rollout.ParseRecipients(*releases) // a comma list, blanks dropped
	if len(releaseNS) == 0 {
		releaseNS = []string{*fluxNS}
	}
	var sources []notifyv1.CrossNamespaceObjectReference
	for _, k := range flux.Kinds() {
		switch {
		case !k.Alert:
		case k.Role == flux.Release:
			for _, n := range releaseNS {
				ref := notifyv1.CrossNamespaceObjectReference{Kind: k.Kind, Name: "*"}
				if n != *fluxNS {
					ref.Namespace = n
				}
				sources = append(sources, ref)
			}
		default:
			sources = append(sources, notifyv1.CrossNamespaceObjectReference{Kind: k.Kind, Name: "*"})
		}
	}
	if *url == "" {
		*url = fmt.Sprintf("http://flux-deploy-notifier.%s.svc.cluster.local:8080/webhook", *ns)
	}
	const name = "flux-deploy-notifier"
	labels := map[string]string{"app.kubernetes.io/name": name}
	objMeta := metav1.ObjectMeta{Name: name, Namespace: *fluxNS, Labels: labels}
	objs := []any{
		&corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: objMeta,
			StringData: map[string]string{"token": tokenPlaceholder},
		},
		&notifyv1beta3.Provider{
			TypeMeta:   metav1.TypeMeta{APIVersion: notifyv1beta3.GroupVersion.String(), Kind: notifyv1beta3.ProviderKind},
			ObjectMeta: objMeta,
			Spec: notifyv1beta3.ProviderSpec{
				Type:      notifyv1beta3.GenericHMACProvider,
				Address:   *url,
				SecretRef: &meta.LocalObjectReference{Name: name},
				Timeout:   &metav1.Duration{Duration: 15e9},
			},
		},
		&notifyv1beta3.Alert{
			TypeMeta:   metav1.TypeMeta{APIVersion: notifyv1beta3.GroupVersion.String(), Kind: notifyv1beta3.AlertKind},
			ObjectMeta: objMeta,
			Spec: notifyv1beta3.AlertSpec{
				ProviderRef:   meta.LocalObjectReference{Name: name},
				EventSeverity: "info",
				EventSources:  sources,
				EventMetadata: map[string]string{"cluster": *cluster},
			},
		},
	}
	if *reader {
		objs = append(objs, readerAccess(*ns, labels)...)
	}
	return writeObjects(stdout, "# Generated by `flux-deploy-notifier manifests`: registers the service with notification-controller.", objs...)
}

// writeObjects writes objs as YAML documents after a comment line,
// without the empty creationTimestamp the API types marshal.
func writeObjects(w io.Writer, comment string, objs ...any) error {
	var buf bytes.Buffer
	buf.WriteString(comment + "\n")
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		buf.WriteString("---\n")
		buf.Write(bytes.ReplaceAll(b, []byte("  creationTimestamp: null\n"), nil))
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// readerName names what a hub reads a cluster as: its ServiceAccount, the
// ClusterRole and binding, and the Secret of its token.
const readerName = "flux-deploy-notifier-reader"

// readerAccess is what a hub needs on a cluster to read it (manifests
// --reader): a ServiceAccount in ns, bound to a ClusterRole of the
// reader's rules alone (cluster.Rules, as manifests/rbac.yaml grants the
// service's own), and a Secret the token controller fills with a token of
// it that does not expire, for the hub's kubeconfig (--register).
func readerAccess(ns string, labels map[string]string) []any {
	saMeta := metav1.ObjectMeta{Name: readerName, Namespace: ns, Labels: labels}
	clusterMeta := metav1.ObjectMeta{Name: readerName, Labels: labels}
	return []any{
		&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}},
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: saMeta},
		&rbacv1.ClusterRole{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"}, ObjectMeta: clusterMeta,
			Rules: clusterpkg.Rules()},
		&rbacv1.ClusterRoleBinding{TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"}, ObjectMeta: clusterMeta,
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: readerName},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: readerName, Namespace: ns}}},
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: readerName, Namespace: ns, Labels: labels,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: readerName}},
			Type: corev1.SecretTypeServiceAccountToken},
	}
}

// registration is manifests --register's: the Secret that registers a
// cluster with a hub, its kubeconfig made from the reader's token.
type registration struct {
	server, tokenFile, caFile, environment *string
}

func (r registration) print(name, ns string, stdout io.Writer) error {
	if *r.server == "" || *r.tokenFile == "" {
		return errors.New("--register needs --server and --token-file")
	}
	token, err := readSecret(*r.tokenFile)
	if err != nil {
		return fmt.Errorf("--token-file: %w", err)
	}
	cl := clientcmdapi.NewCluster()
	cl.Server = *r.server
	if *r.caFile != "" {
		if cl.CertificateAuthorityData, err = os.ReadFile(*r.caFile); err != nil {
			return fmt.Errorf("--ca-file: %w", err)
		}
	}
	user := clientcmdapi.NewAuthInfo()
	user.Token = token
	kctx := clientcmdapi.NewContext()
	kctx.Cluster, kctx.AuthInfo = name, readerName
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name], cfg.AuthInfos[readerName], cfg.Contexts[name], cfg.CurrentContext = cl, user, kctx, name
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	labels := map[string]string{clusters.ClusterLabel: name}
	if *r.environment != "" {
		labels[clusters.EnvironmentLabel] = *r.environment
	}
	return writeObjects(stdout, "# Generated by `flux-deploy-notifier manifests --register`: registers cluster "+name+" with the hub; apply it on the hub. It holds a token.",
		&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-" + name, Namespace: ns, Labels: labels},
			StringData: map[string]string{clusters.Keys[0]: string(kubeconfig)}})
}
