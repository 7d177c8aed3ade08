package secret_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// TestFile: a secret is read again when its file changes; NewFile trims
// it, NewExactFile keeps its bytes; an empty or missing file is refused,
// naming the secret and never its content.
func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("xoxb-1\n")
	trimmed, err := secret.NewFile(path, "Slack token")
	if err != nil {
		t.Fatal(err)
	}
	exact, err := secret.NewExactFile(path, "webhook secret")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := trimmed.Get(); got != "xoxb-1" {
		t.Fatalf("trimmed %q", got)
	}
	if got, _ := exact.Get(); got != "xoxb-1\n" {
		t.Fatalf("exact %q", got)
	}
	write("xoxb-22\n") // rotated (another size: whatever the file system's mtime granularity)
	if got, _ := trimmed.Get(); got != "xoxb-22" {
		t.Fatalf("after a rotation %q", got)
	}
	write(" \n")
	if _, err := trimmed.Get(); err == nil || !strings.Contains(err.Error(), "Slack token") || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("an empty file: %v", err)
	}
	if _, err := exact.Get(); err == nil {
		t.Fatal("an exact key of spaces is taken")
	}
	if _, err := secret.NewFile(filepath.Join(t.TempDir(), "none"), "Slack token"); err == nil || !strings.Contains(err.Error(), "Slack token") {
		t.Fatalf("a missing file: %v", err)
	}
	if _, err := secret.NewFile("", "Slack token"); err == nil {
		t.Fatal("no file given is taken")
	}
}
