package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/loadkit"
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
	svc := exec.Command(binary, serve...)
	svc.Stderr = os.Stderr
	url, stop, err := loadkit.Start(svc, 10*time.Second, nil)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := loadkit.AwaitReady(http.DefaultClient, url, time.Minute); err != nil {
		return nil, err
	}
	cmd := exec.Command(fdnload, append([]string{"-url", url + "/webhook", "-token-file", token, "-layers", fmt.Sprint(width)}, args...)...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("fdnload: %w", err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n"), nil
}
