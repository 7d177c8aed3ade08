// Package mail turns the outbox's due mails into messages and delivers
// them: rendering from templates, go-mail for SMTP (or .eml files in a
// directory), and a dispatcher that retries transient failures with a
// backoff kept in the outbox record and dead-letters permanent ones.
package mail

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	htmltemplate "html/template"
	"io/fs"
	"slices"
	"strings"
	texttemplate "text/template"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Data is what the templates see. Everything in it came from Flux events:
// it is data, escaped in HTML and stripped of line breaks in headers.
type Data struct {
	// Title is the subject without its "[flux] " tag, for the HTML part:
	// the subject is written once, in mail.txt.tmpl.
	Title         string
	Kind          string
	Cluster       string
	Revision      string
	Short         string
	CommitSubject string
	Verdict       string
	Summary       string
	ExpectedFrom  string
	Layer         string
	Reason        string
	Message       string
	// Release is, on a failed mail, the release inside Layer that failed
	// (Kind/namespace/name), and Remediation what helm-controller did next.
	Release     string
	Remediation string
	Object      *rollout.Object
	Layers      []LayerRow
	Duration    string
	Deadline    string
	Late        bool
	Behind      []string
	RootCause   string
	RootState   string
	RootMessage string
	URL         string
	Since       string // blind: last event from notification-controller
	Warning     string // blind: what is wrong and what to check
	LayerCount  int    // blind: layers the cluster reader sees
}

// LayerRow is one layer in a mail.
type LayerRow struct {
	Name, State, At string
}

// maxMailMessage bounds a Flux message quoted in a mail.
const maxMailMessage = 2000

// Rendered is a mail ready to be sent.
type Rendered struct {
	Subject   string
	Text      string
	HTML      string
	MessageID string
	Date      time.Time
	To        string
}

// Renderer renders mails from templates.
type Renderer struct {
	text        *texttemplate.Template
	html        *htmltemplate.Template
	externalURL string
}

// NewRenderer parses mail.txt.tmpl and mail.html.tmpl from fsys.
// externalURL, when set, is the service's address as people reach it; mails
// then link to the verdict.
func NewRenderer(fsys fs.FS, externalURL string) (*Renderer, error) {
	funcs := map[string]any{"join": strings.Join}
	t, err := texttemplate.New("mail.txt.tmpl").Funcs(funcs).ParseFS(fsys, "mail.txt.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse text template: %w", err)
	}
	h, err := htmltemplate.New("mail.html.tmpl").Funcs(funcs).ParseFS(fsys, "mail.html.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse html template: %w", err)
	}
	for _, name := range []string{"subject", "body"} {
		if t.Lookup(name) == nil {
			return nil, fmt.Errorf("mail.txt.tmpl does not define %q", name)
		}
	}
	if h.Lookup("html") == nil {
		return nil, fmt.Errorf("mail.html.tmpl does not define \"html\"")
	}
	return &Renderer{text: t, html: h, externalURL: strings.TrimRight(externalURL, "/")}, nil
}

// subjectTag begins every subject (mail.txt.tmpl), so that mail filters
// can sort them; the HTML part's title goes without it.
const subjectTag = "[flux] "

// Render renders one queued mail. Its date is when it became due and its
// Message-ID derives from its de-duplication key, so a resend after a crash
// is recognisably the same mail.
func (r *Renderer) Render(q outbox.Queued) (Rendered, error) {
	d := r.data(q.Mail)
	var subj, text, html bytes.Buffer
	if err := r.text.ExecuteTemplate(&subj, "subject", d); err != nil {
		return Rendered{}, fmt.Errorf("render subject: %w", err)
	}
	subject := headerSafe(subj.String())
	d.Title = strings.TrimPrefix(subject, subjectTag)
	if c, n := utf8.DecodeRuneInString(d.Title); n > 0 {
		d.Title = string(unicode.ToUpper(c)) + d.Title[n:] // a heading
	}
	if err := r.text.ExecuteTemplate(&text, "body", d); err != nil {
		return Rendered{}, fmt.Errorf("render text: %w", err)
	}
	if err := r.html.ExecuteTemplate(&html, "html", d); err != nil {
		return Rendered{}, fmt.Errorf("render html: %w", err)
	}
	return Rendered{
		Subject:   subject,
		Text:      text.String(),
		HTML:      html.String(),
		MessageID: MessageID(q.Mail.Key),
		Date:      q.Enqueued,
		To:        q.Mail.To,
	}, nil
}

// MessageID derives a Message-ID (without angle brackets) from a mail's
// de-duplication key.
func MessageID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:16]) + "@flux-deploy-notifier"
}

func (r *Renderer) data(m rollout.Mail) Data {
	if s := m.Blind; s != nil || m.View == nil {
		d := Data{Kind: string(m.Kind)}
		if s != nil {
			// A registered cluster's pipe is named by the mail's key alone
			// (the service's own: none).
			k, _ := rollout.ParseMailKey(m.Key)
			d.Cluster, d.Since, d.Warning, d.LayerCount = k.Cluster, s.Since.UTC().Format(time.RFC3339), s.Warning, s.Layers
		}
		if r.externalURL != "" {
			d.URL = r.externalURL + edge.UIRoot
		}
		return d
	}
	v := m.View
	d := Data{
		Kind: string(m.Kind), Cluster: v.Cluster, Revision: v.Named(), Short: flux.Short(v.CommitHash()),
		CommitSubject: oneLine(v.Subject), Verdict: v.Verdict.String(), Summary: v.Summary,
		ExpectedFrom: v.ExpectedFrom, Layer: m.Layer, Reason: m.Reason, Object: m.Object,
		Deadline: v.Deadline.UTC().Format(time.RFC3339), Late: v.Late, Behind: v.Behind, RootCause: v.RootCause,
	}
	// In the order the layers got there, which is the order Flux applied
	// them in; layers that have not reported come last.
	layers := v.Layers.Slice()
	at := func(l rollout.LayerView) time.Time {
		if l.At == nil {
			return time.Unix(1<<62, 0) // never: after every time
		}
		return *l.At
	}
	slices.SortStableFunc(layers, func(a, b rollout.LayerView) int { return at(a).Compare(at(b)) })
	for _, l := range layers {
		row := LayerRow{Name: l.Name, State: string(l.State)}
		if l.At != nil {
			row.At = l.At.UTC().Format("15:04:05")
		}
		d.Layers = append(d.Layers, row)
		if l.Name == v.RootCause {
			d.RootState, d.RootMessage = string(l.State), trim(l.Message)
		}
	}
	if v.CompletedAt != nil {
		d.Duration = v.CompletedAt.Sub(v.FirstSeen).Round(time.Second).String()
	}
	for _, f := range v.Failures {
		if f.Layer == m.Layer && f.Release == m.Release && f.Reason == m.Reason {
			d.Message, d.Release, d.Remediation = trim(f.Message), m.Release.String(), trim(f.Remediation)
			if m.Release != (rollout.Ref{}) {
				d.Message = flux.ReleaseError(d.Message)
			}
		}
	}
	if r.externalURL != "" {
		d.URL = r.externalURL + edge.RolloutPath(v.Key())
	}
	return d
}

// trim shortens a Flux message for a mail.
func trim(s string) string { return cut(strings.TrimSpace(s), maxMailMessage) }

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + " …"
}

// oneLine collapses line breaks and other control characters.
func oneLine(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
}

// headerSafe makes a rendered subject a single line: event text can never
// add or change a header.
func headerSafe(s string) string {
	return cut(oneLine(s), 250)
}
