package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// TestMigrate moves a single-replica install: the example rollouts'
// state on bbolt is copied into PostgreSQL and checked; a replica on it
// answers every rollout as the bbolt service did; a second copy, or one
// while a service holds the file, is refused.
func TestMigrate(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	dir := t.TempDir()
	if _, err := enginetest.ExampleMails(dir, now); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Start(t).NewDatabase(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("t"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	migrateArgs := []string{"migrate", "--data-dir", dir, "--postgres", conn}
	if err := run(context.Background(), migrateArgs, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatalf("migrate: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "checked every record") || !strings.Contains(out.String(), "outbox           10") {
		t.Fatalf("migrate said:\n%s", out.String())
	}
	if err := run(context.Background(), migrateArgs, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "already holds") {
		t.Fatalf("a second migrate: %v", err)
	}
	common := []string{"--listen", "127.0.0.1:0", "--hmac-token-file", tokenFile, "--log-format", "text", "--mail-dir", t.TempDir()}
	onBolt := startServe(t, nil, append(common, "--data-dir", dir)...)
	if err := run(context.Background(), migrateArgs, func(string) string { return "" }, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "another process holds it") {
		t.Fatalf("migrate while a service holds the file: %v", err)
	}
	onPostgres := startServe(t, nil, append(common, "--postgres", conn)...)
	obs := enginetest.ExampleObservations(now.Add(-time.Hour))
	seen := map[string]bool{}
	for _, o := range obs {
		if seen[o.Hash] {
			continue
		}
		seen[o.Hash] = true
		want := verdictOf(t, onBolt, o.Hash)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got := verdictOf(t, onPostgres, o.Hash)
			if got == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s on PostgreSQL, %s on bbolt", o.Hash, got, want)
			}
		}
	}
	resp, err := http.Get(onPostgres + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"role":"leader"`) {
		t.Fatalf("/readyz of the one replica: %s", b)
	}
}
