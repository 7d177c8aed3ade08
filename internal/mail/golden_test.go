package mail_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/engine/enginetest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/mail"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/templates"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGolden renders every mail of the example rollouts (fixed clock, so
// fixed dates and Message-IDs) and compares the text and HTML parts with
// testdata/golden. Run `go test ./internal/mail -run Golden -update` after
// changing a template, and read the diff.
func TestGolden(t *testing.T) {
	now := time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)
	qs, err := enginetest.ExampleMails(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	r, err := mail.NewRenderer(templates.FS, "https://fdn.example.com")
	if err != nil {
		t.Fatal(err)
	}
	// The watchdog's mail, about the service rather than a rollout.
	qs = append(qs, outbox.Queued{Enqueued: now, Mail: rollout.Mail{
		Key: "\x00silence\x002026-11-30T12:20:00Z\x00platform-team@example.com", Kind: rollout.MailBlind, To: "platform-team@example.com",
		Blind: &rollout.Blind{Since: now.Add(-40 * time.Minute), Layers: 3,
			Warning: "cluster prod: no event from notification-controller since 2026-11-30T12:20:00Z while 3 layers exist: check the Provider, the Alert and this service's address"},
	}}, outbox.Queued{Enqueued: now, Mail: rollout.Mail{
		// A registered cluster's, which its subject names.
		Key: "\x00silence\x002026-11-30T12:20:00Z\x00platform-team@example.com\x00staging", Kind: rollout.MailBlind, To: "platform-team@example.com",
		Blind: &rollout.Blind{Since: now.Add(-40 * time.Minute), Layers: 12,
			Warning: "cluster staging: no event from notification-controller since 2026-11-30T12:20:00Z while 12 layers exist: check the Provider, the Alert and this service's address"},
	}})
	kinds := map[rollout.MailKind]bool{}
	for i, q := range qs {
		kinds[q.Mail.Kind] = true
		m, err := r.Render(q)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("%02d-%s", i+1, q.Mail.Kind)
		text := fmt.Sprintf("Subject: %s\nTo: %s\nDate: %s\nMessage-ID: <%s>\n\n%s",
			m.Subject, m.To, m.Date.Format(time.RFC1123Z), m.MessageID, m.Text)
		golden(t, name+".txt", text)
		golden(t, name+".html", m.HTML)
	}
	for _, k := range []rollout.MailKind{rollout.MailApplying, rollout.MailApplied, rollout.MailPruneFailed, rollout.MailFailed, rollout.MailStuck, rollout.MailBlind} {
		if !kinds[k] {
			t.Errorf("the examples make no %s mail", k)
		}
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (run with -update and read the diff):\n%s", name, got)
	}
}

// TestRenderStuckWithoutLayers: a rollout only a source has reported reads
// sensibly when it turns stuck.
func TestRenderStuckWithoutLayers(t *testing.T) {
	r, err := mail.NewRenderer(templates.FS, "")
	if err != nil {
		t.Fatal(err)
	}
	v := &rollout.View{Cluster: "prod", Hash: hashOf("S"), Revision: "main@sha1:" + hashOf("S"), Verdict: rollout.VerdictStuck}
	m, err := r.Render(outbox.Queued{Mail: rollout.Mail{Key: "k", Kind: rollout.MailStuck, To: "a@example.com", View: v}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[flux] stuck on prod: " + hashOf("S")[:7] + " reached no layer"; m.Subject != want {
		t.Fatalf("subject %q, want %q", m.Subject, want)
	}
	if strings.Contains(m.Text, "Verdict:") {
		t.Fatal("a link without --external-url")
	}
}

// TestArtifactNamedByItsCommit: an OCI rollout's mails name the commit its
// artifact was built from, with the artifact beside it.
func TestArtifactNamedByItsCommit(t *testing.T) {
	r, err := mail.NewRenderer(templates.FS, "")
	if err != nil {
		t.Fatal(err)
	}
	digest := hashOf("A") + hashOf("A")[:24]
	v := &rollout.View{Cluster: "prod", Hash: digest, Revision: "latest@sha256:" + digest, Origin: "main@sha1:" + hashOf("C"), OriginHash: hashOf("C"),
		Verdict: rollout.VerdictApplied}
	m, err := r.Render(outbox.Queued{Mail: rollout.Mail{Key: "k", Kind: rollout.MailApplied, To: "a@example.com", View: v}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[flux] applied " + hashOf("C")[:7] + " on prod"; m.Subject != want {
		t.Fatalf("subject %q, want %q", m.Subject, want)
	}
	if want := "main@sha1:" + hashOf("C") + " (artifact latest@sha256:" + digest + ")"; !strings.Contains(m.Text, want) || !strings.Contains(m.HTML, want) {
		t.Fatalf("the body does not name the commit and the artifact %q\n%s", want, m.Text)
	}
}
