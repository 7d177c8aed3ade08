package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
)

// The documents these tests hold to the code, relative to this package.
const (
	readmeFile        = "../../README.md"
	configurationFile = "../../docs/configuration.md" // flags, metrics
	pipelinesFile     = "../../docs/pipelines.md"     // wait
	channelsFile      = "../../docs/channels.md"      // the webhook's signature
	architectureFile  = "../../docs/architecture.md"  // the layout
)

// TestDocsConfiguration: the configuration table lists every flag of
// serve, no other, each with its environment variable and, where the flag
// has one, its default.
func TestDocsConfiguration(t *testing.T) {
	var usage bytes.Buffer
	if _, err := parseServe([]string{"-h"}, func(string) string { return "" }, &usage); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve -h: %v", err)
	}
	type flagDoc struct{ env, def string }
	// "  -name type\n    \tusage (FDN_NAME) (default "x")"
	entry := regexp.MustCompile(`(?m)^  -([a-z-]+)[^\n]*\n\s+[^\n]*\((FDN_[A-Z_]+)\)(?: \(default "?([^")]*)"?\))?$`)
	flags := map[string]flagDoc{}
	for _, m := range entry.FindAllStringSubmatch(usage.String(), -1) {
		flags[m[1]] = flagDoc{m[2], m[3]}
	}
	if n := strings.Count(usage.String(), "\n  -"); len(flags) != n || n < 30 {
		t.Fatalf("read %d flags of %d in serve's usage:\n%s", len(flags), n, usage.String())
	}

	section := docSection(t, configurationFile, "Configuration")
	row := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `(FDN_[A-Z_]+)` \\|([^|]*)\\|")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		name, env, def := m[1], m[2], strings.Trim(strings.TrimSpace(m[3]), "`")
		documented[name] = true
		f, ok := flags[name]
		switch {
		case !ok:
			t.Errorf("docs/configuration.md documents --%s, which serve does not have", name)
		case env != f.env:
			t.Errorf("docs/configuration.md: --%s reads %s, serve reads %s", name, env, f.env)
		case f.def != "" && !sameDefault(def, f.def):
			t.Errorf("docs/configuration.md: --%s defaults to %q, serve to %q", name, def, f.def)
		}
	}
	for name := range flags {
		if !documented[name] {
			t.Errorf("--%s is not in docs/configuration.md's table", name)
		}
	}
}

// docSection is the text of a document's "## title" section.
func docSection(t *testing.T, file, title string) string {
	t.Helper()
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("%s has no %q section", file, title)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	return section
}

// sameDefault compares a README default with a flag's, durations by value
// (the README says 30m where the flag prints 30m0s).
func sameDefault(readme, flag string) bool {
	if readme == flag {
		return true
	}
	a, errA := time.ParseDuration(readme)
	b, errB := time.ParseDuration(flag)
	return errA == nil && errB == nil && a == b
}

// TestDocsCommandFlags: every flag of the other commands is named in the
// README, docs/pipelines.md or docs/configuration.md.
func TestDocsCommandFlags(t *testing.T) {
	var docs []byte
	for _, f := range []string{readmeFile, pipelinesFile, configurationFile} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, b...)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`--([a-z][a-z-]*)`).FindAllSubmatch(docs, -1) {
		named[string(m[1])] = true
	}
	name := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for _, cmd := range []string{"wait", "sample", "manifests"} {
		var usage bytes.Buffer
		_ = run(t.Context(), []string{cmd, "-h"}, func(string) string { return "" }, io.Discard, &usage)
		names := name.FindAllStringSubmatch(usage.String(), -1)
		if len(names) < 3 {
			t.Fatalf("%s -h printed %d flags:\n%s", cmd, len(names), usage.String())
		}
		for _, m := range names {
			if !named[m[1]] {
				t.Errorf("%s --%s is not in the README, docs/pipelines.md or docs/configuration.md", cmd, m[1])
			}
		}
	}
}

// checkMetricsDocumented: the metrics table lists every fdn_
// metric family of metrics (a /metrics page of a service with cluster
// access, which has them all), and no other.
func checkMetricsDocumented(t *testing.T, metrics string) {
	t.Helper()
	section := docSection(t, configurationFile, "Metrics")
	documented := map[string]bool{} // false: only with a forge, or on PostgreSQL, which this service has not
	metric := regexp.MustCompile("`(fdn_[a-z_]+)")
	for _, m := range regexp.MustCompile(`(?m)^\| (.*?) \|(.*)$`).FindAllStringSubmatch(section, -1) {
		for _, name := range metric.FindAllStringSubmatch(m[1], -1) {
			documented[name[1]] = !strings.Contains(m[2], "(with a forge") && !strings.Contains(m[2], "(PostgreSQL)")
		}
	}
	exposed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE (fdn_[a-z_]+) `).FindAllStringSubmatch(metrics, -1) {
		exposed[m[1]] = true
		if _, ok := documented[m[1]]; !ok {
			t.Errorf("/metrics has %s, which the metrics table lacks", m[1])
		}
	}
	if len(exposed) < 15 {
		t.Fatalf("only %d fdn_ metric families on /metrics", len(exposed))
	}
	for name, always := range documented {
		if always && !exposed[name] {
			t.Errorf("the metrics table lists %s, which /metrics lacks", name)
		}
	}
}

// TestDocsLayout: the layout names every package of the
// module, and no directory that is not one.
func TestDocsLayout(t *testing.T) {
	section := docSection(t, architectureFile, "Layout")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^((?:cmd|internal)/[a-z0-9/-]+)/ `).FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	pkgs := map[string]bool{}
	for _, root := range []string{"cmd", "internal"} {
		err := filepath.WalkDir(filepath.Join("../..", root), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			dir, _ := filepath.Rel("../..", filepath.Dir(path))
			pkgs[filepath.ToSlash(dir)] = true
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for p := range pkgs {
		if !named[p] {
			t.Errorf("the layout does not name %s", p)
		}
	}
	for p := range named {
		if !pkgs[p] {
			t.Errorf("the layout names %s, which is no package", p)
		}
	}
	if len(pkgs) < 20 {
		t.Fatalf("found %d packages", len(pkgs))
	}
}

// TestDocsSignatureExamples: the documented checks of a webhook's
// signature, in Go and in a shell, take the service's signature (keyed
// with a key file's bytes, its newline included) and refuse another.
func TestDocsSignatureExamples(t *testing.T) {
	section := docSection(t, channelsFile, "Slack, Teams and signed webhooks")
	block := func(lang string) string {
		_, rest, ok := strings.Cut(section, "\n```"+lang+"\n")
		code, _, ok2 := strings.Cut(rest, "\n```\n")
		if !ok || !ok2 {
			t.Fatalf("no %s example", lang)
		}
		return code
	}
	dir := t.TempDir()
	key, body := []byte("hook-key\n"), []byte(`{"specversion":"1.0","id":"x.1"}`)
	if err := os.WriteFile(filepath.Join(dir, "key"), key, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "body.json"), body, 0o600); err != nil {
		t.Fatal(err)
	}
	good := signature.Sign(key, body)
	bad := signature.Sign(bytes.TrimSpace(key), body) // the key without its newline

	for sig, want := range map[string]string{good: "valid", bad: "forged"} {
		cmd := exec.Command("bash", "-c", block("sh"))
		cmd.Dir, cmd.Env = dir, append(os.Environ(), "signature="+sig)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("the shell example says %q (%v), want %s", out, err, want)
		}
	}

	prog := "package main\n\nimport (\n\t\"crypto/hmac\"\n\t\"crypto/sha256\"\n\t\"encoding/hex\"\n\t\"fmt\"\n\t\"io\"\n\t\"net/http\"\n\t\"os\"\n\t\"strings\"\n)\n\n" +
		block("go") + `

func main() {
	key, _ := os.ReadFile("key")
	r, _ := http.NewRequest("POST", "/", strings.NewReader(os.Args[2]))
	r.Header.Set("X-Signature", os.Args[1])
	_, ok := valid(r, key)
	fmt.Println(ok)
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "check")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "main.go")).CombinedOutput(); err != nil {
		t.Fatalf("the Go example does not build: %v\n%s", err, out)
	}
	for sig, want := range map[string]string{good: "true", bad: "false"} {
		cmd := exec.Command(bin, sig, string(body))
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("the Go example says %q (%v), want %s", out, err, want)
		}
	}
}

// TestDocsLinks: every relative link of the README and docs/ reaches a
// file, and a heading there when it names one; and the README stays a
// front door (what it does, set-up, install, use), its reference in docs/.
func TestDocsLinks(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, readmeFile)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)|src="([^"]+)"`)
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if file == readmeFile {
			if n := bytes.Count(text, []byte("\n")); n > 550 {
				t.Errorf("the README has %d lines: move reference and measurements to docs/", n)
			}
		}
		for _, m := range link.FindAllStringSubmatch(string(text), -1) {
			target := m[1] + m[2]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
			}
			doc, err := os.ReadFile(dest)
			if err != nil {
				t.Errorf("%s links %s, which is not there", file, target)
				continue
			}
			if anchor != "" && !headingAnchors(string(doc))[anchor] {
				t.Errorf("%s links %s, whose file has no such heading", file, target)
			}
		}
	}
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings:
// lower case, punctuation dropped, spaces made hyphens.
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}
