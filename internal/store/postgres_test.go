package store

import (
	"context"
	"strings"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// TestPostgresSchema: opening creates the schema once (a second open, and
// two at once, change nothing); a schema or records newer than this binary
// knows are refused with a clear error, as bbolt's file is; the
// connection string's password never shows in an error.
func TestPostgresSchema(t *testing.T) {
	srv := pgtest.Start(t)
	conn := srv.NewDatabase(t)
	done := make(chan *DB, 2)
	for range 2 {
		go func() {
			d, err := OpenPostgres(context.Background(), conn, PostgresOptions{})
			if err != nil {
				t.Error(err)
			}
			done <- d
		}()
	}
	for range 2 {
		if d := <-done; d != nil {
			d.Close()
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	open := func() error {
		d, err := OpenPostgres(context.Background(), conn, PostgresOptions{})
		if err == nil {
			d.Close()
		}
		return err
	}
	if err := open(); err != nil {
		t.Fatalf("opening again: %v", err)
	}
	db := strings.TrimPrefix(conn[strings.Index(conn, "dbname="):], "dbname=")
	db = db[:strings.IndexByte(db, ' ')]
	srv.Exec(t, db, `UPDATE fdn_kv SET value = '\x39' WHERE bucket = 'meta' AND key = '\x736368656d61'`) // schema "9"
	if err := open(); err == nil || !strings.Contains(err.Error(), `schema "9", this binary reads "8"`) {
		t.Fatalf("newer records: %v", err)
	}
	srv.Exec(t, db, `UPDATE fdn_schema SET version = 99`)
	if err := open(); err == nil || !strings.Contains(err.Error(), "PostgreSQL schema 99, this binary knows 1") {
		t.Fatalf("a newer schema: %v", err)
	}
	if _, err := OpenPostgres(context.Background(), "postgres://u:s3cret@%zz/db", PostgresOptions{}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a bad connection string: %v", err)
	}
	if _, err := OpenPostgres(context.Background(), conn+" password=s3cret user=nobody", PostgresOptions{}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a refused login: %v", err)
	}
}
