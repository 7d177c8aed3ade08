package fsync_test

import (
	"path/filepath"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/fsync"
)

func TestDir(t *testing.T) {
	dir := t.TempDir()
	if err := fsync.Dir(dir); err != nil {
		t.Fatalf("sync %s: %v", dir, err)
	}
	if err := fsync.Dir(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing directory synced without an error")
	}
}
