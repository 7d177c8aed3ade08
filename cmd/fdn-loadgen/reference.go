package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store/pgtest"
)

// withReference runs the reference stream (referenceRuns), on PostgreSQL
// too when postgres, which it starts for the runs.
func withReference(fdnload, binary string, postgres bool, out io.Writer) error {
	if fdnload == "" {
		return errors.New("-only-reference needs -reference")
	}
	var pg *pgtest.Server
	if postgres {
		var err error
		if pg, err = pgtest.Launch(); err != nil {
			return fmt.Errorf("start PostgreSQL (make postgres installs it; -postgres=false skips these runs): %w", err)
		}
		defer pg.Close()
	}
	return referenceRuns(fdnload, binary, pg, out)
}

// referenceRuns runs the reference load stream (fdnload, ../shared/tools
// in the project's workspace: its README says what it sends) against the
// service as users run it, the binary's serve with its whole wiring, on
// bbolt and, with pg, on PostgreSQL: at 20 and 1,000 layers a revision,
// the saturation run and the ack latency after it, then the ack latency on
// a service that saw no burst. Each run gets a fresh service; fdnload
// measures its bare handler in the same run and prints the figures, which
// are printed here as it gives them.
func referenceRuns(fdnload, binary string, pg *pgtest.Server, out io.Writer) error {
	stores := []string{"bbolt"}
	if pg != nil {
		stores = append(stores, "postgres")
	}
	for _, st := range stores {
		for _, width := range []int{20, 1000} {
			for _, mode := range [][]string{nil, {"-latency-only"}} {
				conn := ""
				if st == "postgres" {
					var err error
					if conn, err = pg.CreateDatabase(); err != nil {
						return err
					}
				}
				lines, err := referenceRun(fdnload, binary, conn, width, mode)
				if err != nil {
					return fmt.Errorf("reference stream, %s, %d layers: %w", st, width, err)
				}
				for _, l := range lines {
					fmt.Fprintf(out, "reference stream, %s, %d layers: %s\n", st, width, l)
				}
			}
		}
	}
	return nil
}

// referenceRun starts the service (on conn when not empty, else on a
// bbolt file), runs fdnload against it with args and returns what fdnload
// printed.
func referenceRun(fdnload, binary, conn string, width int, args []string) ([]string, error) {
	dir, err := os.MkdirTemp("", "fdn-loadgen-reference-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte(rand.Text()), 0o600); err != nil {
		return nil, err
	}
	serve := []string{"serve", "--listen", "127.0.0.1:0", "--hmac-token-file", token, "--log-level", "warn",
		"--data-dir", filepath.Join(dir, "data")}
	if conn != "" {
		// No --mail-to: no mail is due, as on bbolt; --postgres asks
		// where mails would go.
		serve = append(serve, "--postgres", conn, "--mail-dir", filepath.Join(dir, "mail"))
	}
	url, stop, err := startService(binary, serve)
	if err != nil {
		return nil, err
	}
	defer stop()
	cmd := exec.Command(fdnload, append([]string{"-url", url + "/webhook", "-token-file", token, "-layers", fmt.Sprint(width)}, args...)...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("fdnload: %w", err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n"), nil
}

// startService starts binary with args and waits until it is ready; stop
// ends it (SIGTERM to the PID it started, then SIGKILL after 10 s).
func startService(binary string, args []string) (url string, stop func(), err error) {
	cmd := exec.Command(binary, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, u, ok := strings.Cut(sc.Text(), "listening on "); ok {
				found <- u
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	select {
	case url = <-found:
	case <-done:
		return "", nil, errors.New("the service stopped before it listened")
	case <-ctx.Done():
		stop()
		return "", nil, errors.New("the service did not listen within 60 s")
	}
	for {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, stop, nil
			}
		}
		select {
		case <-done:
			return "", nil, errors.New("the service stopped before it was ready")
		case <-ctx.Done():
			stop()
			return "", nil, errors.New("the service was not ready within 60 s")
		case <-time.After(50 * time.Millisecond):
		}
	}
}
