// Package secret reads secrets from files (a Secret's key mounted as a
// file), again when the file changes: a rotated token, or a webhook's URL,
// is used at once, without a restart. What it reads is never logged.
package secret

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// File is a secret in a file, read again when the file changes.
type File struct {
	path  string
	what  string // names it in errors: "token"
	exact bool   // the file's bytes as they are: no space trimmed

	mu    sync.Mutex
	mod   time.Time
	size  int64
	token string
}

// NewFile reads the secret at path once, to fail at start when it cannot
// be read; what names it in errors. Spaces around it are not part of it.
func NewFile(path, what string) (*File, error) { return open(path, what, false) }

// NewExactFile is NewFile for a key taken as the file's bytes, a
// trailing newline included: as notification-controller keys its HMAC
// with a Secret's bytes.
func NewExactFile(path, what string) (*File, error) { return open(path, what, true) }

func open(path, what string, exact bool) (*File, error) {
	if path == "" {
		return nil, errors.New(what + ": no file given")
	}
	t := &File{path: path, what: what, exact: exact}
	if _, err := t.Get(); err != nil {
		return nil, err
	}
	return t, nil
}

// Get returns the secret, read again when the file changed.
func (t *File) Get() (string, error) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", t.what, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && fi.ModTime().Equal(t.mod) && fi.Size() == t.size {
		return t.token, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", t.what, err)
	}
	tok := string(b)
	if !t.exact {
		tok = strings.TrimSpace(tok)
	}
	if strings.TrimSpace(tok) == "" {
		return "", fmt.Errorf("%s: %s is empty", t.what, t.path)
	}
	t.token, t.mod, t.size = tok, fi.ModTime(), fi.Size()
	return tok, nil
}
