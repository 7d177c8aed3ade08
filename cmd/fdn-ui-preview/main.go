// Command fdn-ui-preview serves the status pages of the example rollouts
// on loopback and writes screenshots of them with headless chromium: the
// list, an applied, a failed and a stuck rollout, light and dark, 1280 and
// 390 px wide, and the failed one's Slack message (make ui-preview).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/preview"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ui"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/templates"
)

func main() {
	out := flag.String("out", "out/ui-preview", "directory to write the screenshots to")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "fdn-ui-preview:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return fmt.Errorf("chromium not found (apt-get install chromium): %w", err)
	}
	state, err := os.MkdirTemp("", "fdn-ui-preview-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	db, err := store.Open(state)
	if err != nil {
		return err
	}
	defer db.Close()
	// The example rollouts happened in the last hour; the clock reads now.
	now := time.Now().UTC().Truncate(time.Minute)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := rollout.Config{StuckAfter: 30 * time.Minute, Retention: 720 * time.Hour, MailTo: []string{"platform-team@example.com"}, CommitOf: flux.GitCommit}
	e, err := engine.New(db, cfg, log, func() time.Time { return now })
	if err != nil {
		return err
	}
	obs := enginetest.ExampleObservations(now.Add(-time.Hour))
	if err := e.SubmitAll(context.Background(), obs); err != nil {
		return err
	}
	// Some mails went out, one waits for a retry.
	qs, err := db.Pending()
	if err != nil {
		return err
	}
	for i, q := range qs {
		if i == len(qs)-1 {
			q.Retry(now.Add(time.Minute), "421 4.7.0 try again later")
			if err := db.Record(q); err != nil {
				return err
			}
		} else if err := db.Sent(q.Seq, q.Enqueued.Add(2*time.Second)); err != nil {
			return err
		}
	}
	sub, err := fs.Sub(templates.UI, "ui")
	if err != nil {
		return err
	}
	pages, err := ui.New(e, sub, ui.Options{Now: func() time.Time { return now }, Log: log,
		Outbox: func() (int, int, error) { return 1, 0, nil }, Mails: db.MailLog})
	if err != nil {
		return err
	}
	r := chi.NewRouter()
	r.Mount("/ui", pages)
	r.Get("/slack/{cluster}/{hash}", slackPage(e, now))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	hash := func(subject string) string {
		for _, o := range obs {
			if len(o.Subject) >= len(subject) && o.Subject[:len(subject)] == subject {
				return o.Hash
			}
		}
		return ""
	}
	shots := []struct{ name, path string }{
		{"list", "/ui/"},
		{"applied", "/ui/prod/" + hash("Bump web")},
		{"failed", "/ui/prod/" + hash("Remove the legacy")},
		{"stuck", "/ui/prod/" + hash("Recovered")},
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	// The Slack message of the failed rollout, with its reply (README).
	for _, dark := range []bool{false, true} {
		name := "slack-message"
		if dark {
			name += ".dark"
		}
		png := filepath.Join(out, name+".png")
		if err := preview.Screenshot(chromium, base+"/slack/prod/"+hash("Remove the legacy"), png, 720, 560, dark); err != nil {
			return err
		}
		fmt.Println(png)
	}
	for _, s := range shots {
		for _, w := range []int{1280, 390} {
			for _, dark := range []bool{false, true} {
				name := fmt.Sprintf("%s-%d", s.name, w)
				if dark {
					name += ".dark"
				}
				png := filepath.Join(out, name+".png")
				if err := preview.Screenshot(chromium, base+s.path, png, w, 1000, dark); err != nil {
					return err
				}
				fmt.Println(png)
			}
		}
	}
	return nil
}
