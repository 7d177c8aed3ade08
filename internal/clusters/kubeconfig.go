package clusters

import (
	"crypto/sha256"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Keys are the Secret keys a kubeconfig is read from, the first present
// winning: Flux's own kubeConfig.secretRef reads the same two.
var Keys = []string{"value", "value.yaml"}

// errNoKubeconfig is a Secret with neither key.
var errNoKubeconfig = errors.New("no kubeconfig under the key value or value.yaml")

// restConfig reads a registered cluster's kubeconfig. Its errors never
// quote it: a parser's message may carry a piece of the file, which holds
// a token or a key, so they say what is wrong and where, in words of
// their own. A kubeconfig that would make the service run a program (an
// exec credential plugin, an auth provider) or read its own files (a
// certificate, key or token given as a path) is refused: a Secret in the
// service's namespace must not reach its container's files or processes.
func restConfig(data map[string][]byte) (*rest.Config, [sha256.Size]byte, error) {
	var raw []byte
	for _, k := range Keys {
		if v, ok := data[k]; ok {
			raw = v
			break
		}
	}
	if raw == nil {
		return nil, [sha256.Size]byte{}, errNoKubeconfig
	}
	sum := sha256.Sum256(raw)
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, sum, errors.New("the kubeconfig does not parse")
	}
	ctxName := cfg.CurrentContext
	kctx := cfg.Contexts[ctxName]
	if kctx == nil {
		if len(cfg.Contexts) != 1 {
			return nil, sum, errors.New("the kubeconfig has no current context")
		}
		for name, c := range cfg.Contexts {
			ctxName, kctx = name, c
		}
	}
	cl, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	if cl == nil || cl.Server == "" {
		return nil, sum, fmt.Errorf("the kubeconfig's context %q names no cluster with a server", ctxName)
	}
	if err := refuse(cl, user); err != nil {
		return nil, sum, err
	}
	rc, err := clientcmd.NewNonInteractiveClientConfig(*cfg, ctxName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, sum, fmt.Errorf("the kubeconfig's context %q is incomplete", ctxName)
	}
	return rc, sum, nil
}

// refuse says why a kubeconfig's cluster or user must not be used.
func refuse(cl *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) error {
	if cl.CertificateAuthority != "" {
		return errors.New("the kubeconfig names a certificate authority file: embed it (certificate-authority-data)")
	}
	if user == nil {
		return nil
	}
	switch {
	case user.Exec != nil:
		return errors.New("the kubeconfig runs an exec credential plugin, which the service does not run: use a token or a client certificate")
	case user.AuthProvider != nil:
		return errors.New("the kubeconfig uses an auth provider, which the service does not run: use a token or a client certificate")
	case user.ClientCertificate != "" || user.ClientKey != "":
		return errors.New("the kubeconfig names a client certificate or key file: embed them (client-certificate-data, client-key-data)")
	case user.TokenFile != "":
		return errors.New("the kubeconfig names a token file: embed the token")
	}
	return nil
}
