package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"hash"
	"strings"
	"testing"
)

// TestSignature: Sign's signature and those of the other algorithms
// Flux's docs reserve are valid under the key; anything else is not (the
// key with a newline it lacks, another algorithm, no hex).
func TestSignature(t *testing.T) {
	key, body := []byte("my-secret-token"), []byte(`{"a":1}`)
	v := NewVerifier(key)
	if !v.Valid(Sign(key, body), body) {
		t.Fatal("Sign's signature is refused")
	}
	for _, sig := range []string{
		"sha224=" + mac(key, body, "sha224"), "sha384=" + mac(key, body, "sha384"), "sha512=" + mac(key, body, "sha512"),
	} {
		if !v.Valid(sig, body) {
			t.Errorf("%s refused", sig[:6])
		}
	}
	for _, sig := range []string{"", "sha256", "md5=00", Sign([]byte("my-secret-token\n"), body), "sha256=zz"} {
		if v.Valid(sig, body) {
			t.Errorf("%q accepted", sig)
		}
	}
}

// mac is the hex HMAC of body under key with algo's digest.
func mac(key, body []byte, algo string) string {
	digest := map[string]func() hash.Hash{"sha224": sha256.New224, "sha384": sha512.New384, "sha512": sha512.New}[algo]
	m := hmac.New(digest, key)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// FuzzSignature: a signature is valid exactly when it is the HMAC of the
// body under the key, whatever the header holds.
func FuzzSignature(f *testing.F) {
	f.Add([]byte("my-secret-token"), []byte(`{"a":1}`), "sha256=00")
	f.Add([]byte("k\n"), []byte(""), "sha512=")
	f.Add([]byte("k"), []byte("x"), "=")
	f.Fuzz(func(t *testing.T, key, body []byte, sig string) {
		if len(key) == 0 {
			return
		}
		v := NewVerifier(key)
		// The sender's signature first, then a right one: the reused HMAC
		// must not carry the first check into the second.
		forged := v.Valid(sig, body)
		if !v.Valid(Sign(key, body), body) {
			t.Fatal("a signature made with the key is rejected")
		}
		algo, hexSig, _ := strings.Cut(sig, "=")
		if !forged || algo != "sha256" {
			return
		}
		got, err := hex.DecodeString(hexSig)
		mac := hmac.New(sha256.New, key)
		mac.Write(body)
		if err != nil || !hmac.Equal(got, mac.Sum(nil)) {
			t.Fatalf("forged sha256 signature %q accepted", sig)
		}
	})
}
