package github

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
)

// App is a GitHub App installation the forge acts as, instead of a token.
type App struct {
	ID             int64
	InstallationID int64
	// PrivateKeyFile holds the App's private key (PEM, PKCS#1 as GitHub
	// gives it, or PKCS#8).
	PrivateKeyFile string
}

// refreshBefore is how long before its expiry an installation token is
// replaced: a delivery never starts with a token that may expire under it.
const refreshBefore = 5 * time.Minute

// appToken makes installation tokens: a JWT signed with the App's key
// (RS256, valid 9 minutes, issued a minute in the past for clock skew)
// exchanged for an installation token (valid an hour), kept until
// refreshBefore its expiry.
type appToken struct {
	app  App
	key  *rsa.PrivateKey
	base *url.URL
	hc   *http.Client // without the forge's auth
	now  func() time.Time

	mu      sync.Mutex
	token   string
	expires time.Time
}

func newAppToken(app App, base *url.URL, hc *http.Client, now func() time.Time) (*appToken, error) {
	b, err := os.ReadFile(app.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("github app private key: %w", err)
	}
	key, err := parseKey(b)
	if err != nil {
		return nil, fmt.Errorf("github app private key %s: %w", app.PrivateKeyFile, err)
	}
	return &appToken{app: app, key: key, base: base, hc: hc, now: now}, nil
}

func parseKey(b []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("neither a PKCS#1 nor a PKCS#8 private key")
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an RSA key")
	}
	return rk, nil
}

// Get returns the installation token, made anew when it is about to
// expire. A refusal comes back as a outbox.Error: a wrong key or a
// removed installation is permanent.
func (a *appToken) Get(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if a.token != "" && now.Before(a.expires.Add(-refreshBefore)) {
		return a.token, nil
	}
	jwt, err := a.jwt(now)
	if err != nil {
		return "", &outbox.Error{Message: err.Error()}
	}
	u := a.base.JoinPath("app", "installations", strconv.FormatInt(a.app.InstallationID, 10), "access_tokens")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader([]byte("{}")))
	if err != nil {
		return "", &outbox.Error{Message: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+jwt)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "flux-deploy-notifier")
	resp, err := a.hc.Do(req)
	if err != nil {
		return "", &outbox.Error{Retry: true, Message: "installation token: " + err.Error()}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
		Message   string    `json:"message"`
	}
	_ = json.Unmarshal(body, &out)
	if resp.StatusCode != http.StatusCreated || out.Token == "" {
		fe := outbox.Classify(resp.StatusCode, resp.Header, "installation token: "+out.Message, now)
		if resp.StatusCode == http.StatusCreated {
			fe.Message = "installation token: no token in GitHub's answer"
		}
		return "", fe
	}
	a.token, a.expires = out.Token, out.ExpiresAt
	return a.token, nil
}

// jwt is the App's JSON Web Token (RS256) that asks for an installation
// token.
func (a *appToken) jwt(now time.Time) (string, error) {
	enc := base64.RawURLEncoding
	header := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(9 * time.Minute).Unix(), "iss": strconv.FormatInt(a.app.ID, 10),
	})
	signed := header + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", err
	}
	return signed + "." + enc.EncodeToString(sig), nil
}
