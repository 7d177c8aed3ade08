// Package flux holds Flux's wire format and vocabulary: event decoding
// (with what an event's metadata names: its revision and origin, the
// cluster, the recipients, the commit a release names), revision strings
// and the one rule of how a commit is named (commit.go), the reasons
// kustomize-, source- and helm-controller give, PruneFailed messages and
// change sets, helm-controller's remediation reports, what
// kustomize-controller's apply leaves on objects, and the one table of
// kinds (kinds.go: each kind's role, resource, cached type and what the
// reader keeps of it, whether the Alert sends it). It imports nothing of
// this service's: adapters translate what it parses into the domain.
package flux

import (
	"errors"
	"fmt"
	"strings"
)

// Revision is a parsed Flux revision string. Hash is the identity of the
// revision; Ref is only for display. Legacy "main/<hash>" and current
// "main@sha1:<hash>" parse to the same Hash.
type Revision struct {
	Ref  string // "main", "refs/heads/main", "v1.0.0", "latest"; empty for bare digests
	Algo string // "sha1", "sha256", ...; inferred from the length for legacy forms
	Hash string // lowercase hex
}

// ErrRevision is wrapped by every revision parse error.
var ErrRevision = errors.New("invalid revision")

// hexLen maps the digest algorithms Flux writes into revisions to the length
// of their hex encoding.
var hexLen = map[string]int{"sha1": 40, "sha256": 64, "sha384": 96, "sha512": 128}

// ParseRevision accepts every form Flux has used:
//
//	main@sha1:<40 hex>, feature/x@sha1:..., refs/heads/main@sha1:..., v1.0.0@sha1:...
//	sha1:<40 hex>, sha256:<64 hex>, latest@sha256:<64 hex>
//	main/<40 hex>, HEAD/<40 hex> (before Flux 2.0), and a bare 40 or 64 hex hash.
func ParseRevision(s string) (Revision, error) {
	if s == "" {
		return Revision{}, fmt.Errorf("%w: empty", ErrRevision)
	}
	if len(s) > 1024 {
		return Revision{}, fmt.Errorf("%w: longer than 1024 bytes", ErrRevision)
	}
	// The digest never contains '@', a ref may, so the last '@' splits them.
	ref, digest := "", s
	if i := strings.LastIndexByte(s, '@'); i >= 0 {
		ref, digest = s[:i], s[i+1:]
		if ref == "" {
			return Revision{}, fmt.Errorf("%w: %q has an empty ref before '@'", ErrRevision, s)
		}
	}
	if algo, hex, ok := strings.Cut(digest, ":"); ok {
		want, known := hexLen[algo]
		if !known {
			return Revision{}, fmt.Errorf("%w: %q has unknown digest algorithm %q", ErrRevision, s, algo)
		}
		h, err := normHex(hex, want)
		if err != nil {
			return Revision{}, fmt.Errorf("%w: %q: %v", ErrRevision, s, err)
		}
		return Revision{Ref: ref, Algo: algo, Hash: h}, nil
	}
	if ref != "" {
		return Revision{}, fmt.Errorf("%w: %q lacks '<algo>:' after '@'", ErrRevision, s)
	}
	// Legacy "<ref>/<hex>" or a bare hash.
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		ref, digest = s[:i], s[i+1:]
		if ref == "" {
			return Revision{}, fmt.Errorf("%w: %q has an empty ref before '/'", ErrRevision, s)
		}
	}
	for _, algo := range []string{"sha1", "sha256"} {
		if len(digest) == hexLen[algo] {
			h, err := normHex(digest, hexLen[algo])
			if err != nil {
				return Revision{}, fmt.Errorf("%w: %q: %v", ErrRevision, s, err)
			}
			return Revision{Ref: ref, Algo: algo, Hash: h}, nil
		}
	}
	return Revision{}, fmt.Errorf("%w: %q is not <ref>@<algo>:<hex>, <algo>:<hex> or <ref>/<hex>", ErrRevision, s)
}

// String renders the revision in Flux's current form.
func (r Revision) String() string {
	if r.Ref == "" {
		return r.Algo + ":" + r.Hash
	}
	return r.Ref + "@" + r.Algo + ":" + r.Hash
}

func normHex(s string, n int) (string, error) {
	if len(s) != n {
		return "", fmt.Errorf("digest has %d hex digits, want %d", len(s), n)
	}
	if !IsHex(s) {
		return "", errors.New("digest is not hex")
	}
	return strings.ToLower(s), nil
}

// IsHex reports whether s is non-empty and only hex digits.
func IsHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// ParseQuery parses what a pipeline asks about: a full revision, a full
// 40/64 hex hash, or a hex prefix of at least MinPrefix digits. prefix is true when
// the answer must be looked up as a prefix.
func ParseQuery(s string) (hash string, prefix bool, err error) {
	if IsHex(s) {
		switch {
		case len(s) == 40 || len(s) == 64:
			return strings.ToLower(s), false, nil
		case len(s) >= MinPrefix && len(s) < 64:
			return strings.ToLower(s), true, nil
		default:
			return "", false, fmt.Errorf("%w: a hash prefix needs %d to 64 hex digits, got %d", ErrRevision, MinPrefix, len(s))
		}
	}
	r, err := ParseRevision(s)
	if err != nil {
		return "", false, err
	}
	return r.Hash, false, nil
}
