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

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/webhook"
)

// TestREADMEConfiguration: the README's configuration table lists every
// flag of serve, no other, each with its environment variable and, where
// the flag has one, its default.
func TestREADMEConfiguration(t *testing.T) {
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

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := readmeSection(t, string(readme), "Configuration")
	row := regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `(FDN_[A-Z_]+)` \\|([^|]*)\\|")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		name, env, def := m[1], m[2], strings.Trim(strings.TrimSpace(m[3]), "`")
		documented[name] = true
		f, ok := flags[name]
		switch {
		case !ok:
			t.Errorf("README documents --%s, which serve does not have", name)
		case env != f.env:
			t.Errorf("README: --%s reads %s, serve reads %s", name, env, f.env)
		case f.def != "" && !sameDefault(def, f.def):
			t.Errorf("README: --%s defaults to %q, serve to %q", name, def, f.def)
		}
	}
	for name := range flags {
		if !documented[name] {
			t.Errorf("--%s is not in the README's configuration table", name)
		}
	}
}

// readmeSection is the text of the README's "## title" section.
func readmeSection(t *testing.T, readme, title string) string {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README has no %q section", title)
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

// TestREADMECommandFlags: every flag of the other commands is named in the
// README or docs/ci.md.
func TestREADMECommandFlags(t *testing.T) {
	var docs []byte
	for _, f := range []string{"../../README.md", "../../docs/ci.md"} {
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
				t.Errorf("%s --%s is not in the README or docs/ci.md", cmd, m[1])
			}
		}
	}
}

// checkMetricsDocumented: the README's metrics table lists every fdn_
// metric family of metrics (a /metrics page of a service with cluster
// access, which has them all), and no other.
func checkMetricsDocumented(t *testing.T, metrics string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := readmeSection(t, string(readme), "Metrics")
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
			t.Errorf("/metrics has %s, which the README's metrics table lacks", m[1])
		}
	}
	if len(exposed) < 15 {
		t.Fatalf("only %d fdn_ metric families on /metrics", len(exposed))
	}
	for name, always := range documented {
		if always && !exposed[name] {
			t.Errorf("the README's metrics table lists %s, which /metrics lacks", name)
		}
	}
}

// TestREADMELayout: the README's layout names every package of the
// module, and no directory that is not one.
func TestREADMELayout(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := readmeSection(t, string(readme), "Layout")
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
			t.Errorf("the README's layout does not name %s", p)
		}
	}
	for p := range named {
		if !pkgs[p] {
			t.Errorf("the README's layout names %s, which is no package", p)
		}
	}
	if len(pkgs) < 20 {
		t.Fatalf("found %d packages", len(pkgs))
	}
}

// TestREADMESignatureExamples: the README's checks of a webhook's
// signature, in Go and in a shell, take the service's signature (keyed
// with a key file's bytes, its newline included) and refuse another.
func TestREADMESignatureExamples(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := readmeSection(t, string(readme), "Slack, Teams and signed webhooks")
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
	good := webhook.Sign(key, body)
	bad := webhook.Sign(bytes.TrimSpace(key), body) // the key without its newline

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
