package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// migrate copies a bbolt state into PostgreSQL and checks the copy: how a
// single-replica install moves to several replicas without losing history
// or sending a mail twice (docs/architecture.md, "Several replicas").
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	f := newFlags("migrate", getenv, stderr)
	dataDir := f.String("data-dir", "FDN_DATA_DIR", "./data", "directory of the bbolt state to copy (the service on it stopped)")
	var pc postgresConfig
	pc.flags(f)
	if err := f.parse(args); err != nil {
		return err
	}
	if err := pc.validate(); err != nil {
		return err
	}
	if !pc.enabled() {
		return errors.New("--postgres is required: the database to copy into")
	}
	if _, err := os.Stat(filepath.Join(*dataDir, store.FileName)); err != nil {
		return fmt.Errorf("--data-dir: no state to copy: %w", err)
	}
	// Opening replays the write-ahead log and fails fast while a service
	// holds the file.
	src, err := store.Open(*dataDir)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, co, err := pc.open(ctx, "migrate")
	if err != nil {
		return err
	}
	defer dst.Close()
	switch running, err := co.LeaderRunning(ctx); {
	case err != nil:
		return err
	case running:
		return store.ErrLeaderRunning
	}
	counts, err := store.Copy(dst, src)
	if err != nil {
		return err
	}
	if err := store.Compare(dst, src); err != nil {
		return fmt.Errorf("the copy differs from the state: %w", err)
	}
	names := make([]string, 0, len(counts))
	for name := range counts {
		names = append(names, name)
	}
	sort.Strings(names)
	fmt.Fprintf(stdout, "copied %s into PostgreSQL and checked every record:\n", *dataDir)
	for _, name := range names {
		fmt.Fprintf(stdout, "  %-16s %d\n", name, counts[name])
	}
	fmt.Fprintln(stdout, "start the replicas with --postgres; keep the data directory until they serve")
	return nil
}
