// Package pgtest runs a real PostgreSQL for tests: initdb into a temporary
// directory as an unprivileged user (initdb refuses root), the server on a
// unix socket in that directory (no TCP port), a fresh database for each
// test that asks. The binaries are Debian's postgresql package's, which
// make test installs when they are missing.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Server is one PostgreSQL server started by a test, stopped by its
// cleanup.
type Server struct {
	dir  string // owns data/, the socket and server.log
	bin  string
	cred *syscall.Credential // nil: run as this process's user

	mu   sync.Mutex
	proc *os.Process // the postgres process this test started
	done chan error  // its exit
	n    int         // databases made
}

// Start initializes and starts a server; the test's cleanup stops it and
// removes its files.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Launch is Start outside a test (the load generator's): Close stops the
// server and removes its files.
func Launch() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL needs an unprivileged user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// Not t.TempDir: its parents are private to this user, and the
	// server's user must reach the directory.
	if s.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, err
	}
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			os.RemoveAll(s.dir)
			return nil, err
		}
	}
	initdb := s.command(filepath.Join(bin, "initdb"), "-D", s.data(), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(s.dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	if err := s.start(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close stops the server and removes its files.
func (s *Server) Close() {
	s.stop()
	os.RemoveAll(s.dir)
}

// binDir finds the server's binaries: pg_config's, else the newest of
// Debian's versioned directories.
func binDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := string(out[:len(out)-1]); fileExists(filepath.Join(dir, "initdb")) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if fileExists(filepath.Join(dirs[i], "initdb")) {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (initdb): make test installs Debian's postgresql package")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return cmd
}

// start runs the server and waits until it takes connections.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := s.command(filepath.Join(s.bin, "postgres"), "-D", s.data(), "-k", s.dir, "-c", "listen_addresses=",
		"-c", "max_connections=200", "-c", "shared_buffers=32MB")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	s.proc, s.done = cmd.Process, done
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, s.ConnString("postgres"))
		cancel()
		if err == nil {
			return c.Close(context.Background())
		}
		select {
		case werr := <-done:
			s.proc = nil
			b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
			return fmt.Errorf("postgres exited (%v):\n%s", werr, b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after 30s: %v", err)
		}
	}
}

// stop shuts the server down (fast shutdown: SIGINT to the process this
// test started), killing it when it does not stop within 30 seconds.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Signal(os.Interrupt)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.proc.Kill()
		<-s.done
	}
	s.proc = nil
}

// Bounce is Restart for a goroutine other than the test's: it returns
// the failure instead of failing the test.
func (s *Server) Bounce() error {
	s.stop()
	return s.start()
}

// Stop shuts the server down until Resume: the database is unreachable.
func (s *Server) Stop() { s.stop() }

// Resume starts the server again on the same data after Stop.
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Exec runs sql in the database of conn (NewDatabase's, as the
// superuser), for tests that act on the database behind the store.
func (s *Server) Exec(t testing.TB, conn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
}

// Restart stops the server and starts it again on the same data: what a
// database restart does to the service's connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// ConnString is the libpq keyword string of database db, over the unix
// socket.
func (s *Server) ConnString(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=postgres dbname=%s sslmode=disable", s.dir, db)
}

// NewDatabase makes an empty database of its own for a test and returns
// its connection string.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	conn, err := s.CreateDatabase()
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// CreateDatabase makes an empty database and returns its connection
// string.
func (s *Server) CreateDatabase() (string, error) {
	s.mu.Lock()
	s.n++
	name := fmt.Sprintf("test_%d", s.n)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, s.ConnString("postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	return s.ConnString(name), nil
}
