// Command fdn-mail-preview writes every mail of the example rollouts to a
// directory, as .eml and .html files, and, when chromium is installed, a PNG
// screenshot of each HTML part at 600 px wide, in light and dark mode, so a
// person can look at them.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/preview"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/templates"
)

func main() {
	out := flag.String("out", "out/mail-preview", "directory to write the previews to")
	tmpl := flag.String("templates", "", "directory overriding the embedded templates")
	flag.Parse()
	if err := run(*out, *tmpl); err != nil {
		fmt.Fprintln(os.Stderr, "fdn-mail-preview:", err)
		os.Exit(1)
	}
}

func run(out, tmplDir string) error {
	state, err := os.MkdirTemp("", "fdn-mail-preview-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	qs, err := enginetest.ExampleMails(state, time.Now().UTC().Truncate(time.Minute))
	if err != nil {
		return err
	}
	var fsys fs.FS = templates.FS
	if tmplDir != "" {
		fsys = os.DirFS(tmplDir)
	}
	r, err := mail.NewRenderer(fsys, "http://127.0.0.1:8080")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	emlDir, err := os.MkdirTemp(out, ".eml-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(emlDir)
	dir, err := mail.NewDir(emlDir, "flux-deploy-notifier@example.com")
	if err != nil {
		return err
	}
	chromium, _ := exec.LookPath("chromium")
	for i, q := range qs {
		m, err := r.Render(q)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%02d-%s", i+1, q.Mail.Kind)
		if res := dir.Send(context.Background(), []mail.Rendered{m})[0]; res.Err != nil {
			return res.Err
		}
		files, _ := filepath.Glob(filepath.Join(emlDir, "*.eml"))
		if len(files) != 1 {
			return fmt.Errorf("expected one .eml, found %d", len(files))
		}
		if err := os.Rename(files[0], filepath.Join(out, name+".eml")); err != nil {
			return err
		}
		html := filepath.Join(out, name+".html")
		if err := os.WriteFile(html, []byte(m.HTML), 0o644); err != nil {
			return err
		}
		fmt.Printf("%s  %s\n", name, m.Subject)
		if chromium != "" {
			if err := screenshot(chromium, html, filepath.Join(out, name+".png"), false); err != nil {
				return err
			}
			if err := screenshot(chromium, html, filepath.Join(out, name+".dark.png"), true); err != nil {
				return err
			}
		}
	}
	if chromium == "" {
		fmt.Println("chromium not found: no screenshots (apt-get install chromium)")
	}
	fmt.Printf("previews in %s\n", out)
	return nil
}

// screenshot renders an HTML file in headless chromium at 600 px wide.
func screenshot(chromium, html, png string, dark bool) error {
	abs, err := filepath.Abs(html)
	if err != nil {
		return err
	}
	return preview.Screenshot(chromium, "file://"+abs, png, 600, 900, dark)
}
