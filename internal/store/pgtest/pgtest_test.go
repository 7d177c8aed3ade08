package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// TestServer: a real PostgreSQL, a database of the test's own that keeps a
// committed row across a restart of the server, and two databases apart.
func TestServer(t *testing.T) {
	s := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := s.NewDatabase(t)
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "CREATE TABLE kept (k text PRIMARY KEY, v bigint)"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "INSERT INTO kept VALUES ($1, $2)", "a", 42); err != nil {
		t.Fatal(err)
	}
	c.Close(ctx)

	s.Restart(t)
	if c, err = pgx.Connect(ctx, conn); err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v int64
	if err := c.QueryRow(ctx, "SELECT v FROM kept WHERE k = $1", "a").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after a restart: %d, %v; want the committed row", v, err)
	}
	other, err := pgx.Connect(ctx, s.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, "SELECT 1 FROM kept"); err == nil {
		t.Fatal("a new database sees another's table")
	}
}
