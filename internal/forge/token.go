package forge

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// TokenFile is a forge's token in a file (a Secret's key mounted as a
// file), read again when the file changes: a rotated token is used at
// once, without a restart. It is never logged.
type TokenFile struct {
	path string

	mu    sync.Mutex
	mod   time.Time
	size  int64
	token string
}

// NewTokenFile reads the token at path once, to fail at start when it
// cannot be read.
func NewTokenFile(path string) (*TokenFile, error) {
	if path == "" {
		return nil, errors.New("token: no file given")
	}
	t := &TokenFile{path: path}
	if _, err := t.Get(); err != nil {
		return nil, err
	}
	return t, nil
}

// Get returns the token, read again when the file changed.
func (t *TokenFile) Get() (string, error) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && fi.ModTime().Equal(t.mod) && fi.Size() == t.size {
		return t.token, nil
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token: %s is empty", t.path)
	}
	t.token, t.mod, t.size = tok, fi.ModTime(), fi.Size()
	return tok, nil
}
