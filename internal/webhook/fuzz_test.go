package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

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
		h := New(key, nil, nil, nil)
		// The sender's signature first, then a right one: the reused HMAC
		// must not carry the first check into the second.
		forged := h.validSignature(sig, body)
		if !h.validSignature(Sign(key, body), body) {
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
