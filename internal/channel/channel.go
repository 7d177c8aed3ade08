// Package channel is the home of the channels the verdicts are shown in
// besides mail: each is a package below it (the forge, Slack, Teams, the
// CloudEvents webhook), an outbox.Deliverer, and none imports another.
// This package is what a message says of a rollout's verdict (Of): one
// message per commit and cluster, in the words every chat and the webhook
// show (Slack's blocks, Teams' cards, the event's data), each escaping
// the text in its own markup. The text from Flux and the cluster is data,
// never markup.
package channel

import (
	"fmt"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Links are where a message links to; each returns "" when not known.
type Links struct {
	// Commit is the commit's page in its forge: that of the repository
	// source names on cluster.
	Commit func(cluster string, source rollout.Ref, commit string) string
	// Page is the rollout's status page (with --external-url).
	Page func(k rollout.Key) string
}

// Message is what a chat shows of one verdict.
type Message struct {
	Verdict  rollout.Verdict
	Cluster  string
	Commit   string // the short commit, or the revision when it names none
	Revision string
	// CommitURL and PageURL are the links, "" when not known.
	CommitURL, PageURL string
	// Headline is the verdict as people say it ("Applied").
	Headline string
	// Progress is how far the layers got ("12 of 85 layers applied it").
	Progress string
	// Failure, for a failed verdict: the layer and what failed in it,
	// Flux's reason, its message; Stuck the layer the others wait on;
	// SupersededBy the newer revision.
	Failure      *rollout.ShownFailure
	Stuck        string
	SupersededBy string
	// At is when it applied (applied), else when the verdict was decided.
	At   time.Time
	Late bool // applied after the deadline
}

// Of is the message that shows p's verdict.
func Of(p outbox.Publication, links Links) Message {
	m := Message{Verdict: p.Verdict, Cluster: p.Key.Cluster, Revision: p.Revision, At: p.Changed, Late: p.Late,
		Headline: Headline(p.Verdict), Stuck: p.RootCause, SupersededBy: p.SupersededBy}
	m.Commit = flux.Short(p.Commit)
	if p.Commit == "" {
		m.Commit = p.Revision
	}
	if p.Commit != "" && links.Commit != nil {
		m.CommitURL = links.Commit(p.Key.Cluster, p.Source, p.Commit)
	}
	if links.Page != nil {
		m.PageURL = links.Page(p.Key)
	}
	if p.Expected > 0 {
		m.Progress = fmt.Sprintf("%d of %d layers applied it", p.Done, p.Expected)
	}
	if p.Verdict == rollout.VerdictApplied && !p.Completed.IsZero() {
		m.At = p.Completed
	}
	if p.Verdict == rollout.VerdictFailed && p.Failure != (rollout.ShownFailure{}) {
		f := p.Failure
		m.Failure = &f
	}
	return m
}

// Headline is a verdict as a message's first word says it.
func Headline(v rollout.Verdict) string {
	switch v {
	case rollout.VerdictApplying:
		return "Applying"
	case rollout.VerdictApplied:
		return "Applied"
	case rollout.VerdictFailed:
		return "Failed"
	case rollout.VerdictStuck:
		return "Stuck"
	case rollout.VerdictSuperseded:
		return "Superseded"
	}
	return v.String()
}

// Summary is the message in one line of plain text, for notifications
// and the chats' fallback text: "Applied abc1234 on prod".
func (m Message) Summary() string {
	return m.Headline + " " + m.Commit + " on " + m.Cluster
}

// Detail is what the verdict says beyond its headline, "" when nothing:
// when it applied, what failed (the layer, the HelmRelease or object,
// Flux's reason), the layer a stuck one waits on, the newer revision.
func (m Message) Detail() string {
	switch {
	case m.Verdict == rollout.VerdictApplied:
		s := "Applied at " + m.At.UTC().Format("2006-01-02 15:04:05 UTC")
		if m.Late {
			s += ", after the deadline"
		}
		return s
	case m.Failure != nil:
		s := "Layer " + m.Failure.Layer + ": " + What(m.Failure) + " " + m.Failure.Reason
		if m.Failure.Stalled {
			s += "; helm-controller stopped trying: a new commit is needed"
		}
		return s
	case m.Verdict == rollout.VerdictStuck && m.Stuck != "":
		return "Not applied by the deadline; waiting on " + m.Stuck
	case m.Verdict == rollout.VerdictSuperseded && m.SupersededBy != "":
		return "Superseded by " + m.SupersededBy + " before every layer applied it"
	}
	return ""
}

// What says what failed: the HelmRelease, else the object, else the
// layer.
func What(f *rollout.ShownFailure) string {
	switch {
	case f.Release != (rollout.Ref{}):
		return "HelmRelease " + f.Release.Namespace + "/" + f.Release.Name
	case f.Object != "":
		return f.Object
	}
	return "the layer"
}
