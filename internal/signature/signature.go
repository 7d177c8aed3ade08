// Package signature is generic-hmac's signature of a request body, as
// notification-controller sends it (X-Signature: <algo>=<hex HMAC of the
// body>): the webhook checks Flux's with it, and the CloudEvents channel
// signs its own the same way, so that a receiver that checks Flux's
// requests checks the service's. Neither owns it.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"hash"
	"strings"
	"sync"
)

// Header is the request header that carries the signature.
const Header = "X-Signature"

// Sign returns the signature of body under key, as Flux makes it:
// "sha256=<lowercase hex>". The key is used as it is: a key file's
// trailing newline is part of it, as notification-controller keys its
// HMAC with a Secret's bytes.
func Sign(key, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// Verifier checks signatures under one key. It is safe for concurrent
// use; its sha256 HMACs are reused (hmac.New allocates two digests and
// their pads for each).
type Verifier struct {
	key  []byte
	macs sync.Pool
}

// NewVerifier returns a verifier of signatures under key.
func NewVerifier(key []byte) *Verifier {
	v := &Verifier{key: key}
	v.macs.New = func() any { return hmac.New(sha256.New, key) }
	return v
}

// Valid reports whether sig ("<algo>=<hex>") is body's signature under
// the key, compared in constant time. Flux sends sha256 today; its docs
// reserve sha224, sha384 and sha512.
func (v *Verifier) Valid(sig string, body []byte) bool {
	algo, hexSig, ok := strings.Cut(sig, "=")
	if !ok {
		return false
	}
	var mac hash.Hash
	switch algo {
	case "sha256":
		mac = v.macs.Get().(hash.Hash)
		defer func() {
			mac.Reset() // back to the key's state, whatever was written
			v.macs.Put(mac)
		}()
	case "sha224":
		mac = hmac.New(sha256.New224, v.key)
	case "sha384":
		mac = hmac.New(sha512.New384, v.key)
	case "sha512":
		mac = hmac.New(sha512.New, v.key)
	default:
		return false
	}
	want, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac.Write(body)
	var sum [sha512.Size]byte
	return hmac.Equal(mac.Sum(sum[:0]), want)
}
