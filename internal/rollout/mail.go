package rollout

import (
	"slices"
	"strings"
	"time"
)

// MailKind names the mails of docs/channels.md's "Mail" section.
type MailKind string

const (
	MailApplying    MailKind = "applying"
	MailApplied     MailKind = "applied"
	MailPruneFailed MailKind = "prune-failed"
	MailFailed      MailKind = "failed"
	MailStuck       MailKind = "stuck"
	MailBlind       MailKind = "blind" // no events from Flux: about the service, not a rollout
)

// Mail is a mail made due by a state change. It is written to the outbox in
// the same transaction as that change; Key makes it go out at most once.
type Mail struct {
	Key    string // de-duplication: rollout, kind, layer/object where relevant, recipient
	Kind   MailKind
	To     string
	Layer  string // failed, prune-failed
	Reason string // failed
	// Release is, on a failed mail, the release inside Layer whose failure
	// it is.
	Release Ref
	Object  *Object // prune-failed
	View    *View   // the rollout as it stood when the mail became due
	// Blind is set, instead of View, on the "no events from Flux" mail.
	Blind *Blind
}

// Blind describes an episode without events from notification-controller:
// the service is blind to Flux.
type Blind struct {
	Since   time.Time
	Layers  int
	Warning string
}

// dueMails is the pure decision of which mails a rollout's view makes due,
// to whom. It does not look at what was sent: the outbox drops a mail whose
// key it has seen, so a condition that still holds never mails twice.
// Recipients are the configured ones plus those the Alerts of the involved
// layers route to (eventMetadata mail_to).
func dueMails(v *View, to []string, routes routing) []Mail {
	if len(to) == 0 && len(routes.all) == 0 {
		return nil
	}
	all := recipients(to, routes, "")
	var out []Mail
	add := func(m Mail, rcpts []string, parts ...string) {
		for _, r := range rcpts {
			m := m
			m.To, m.View = r, v
			m.Key = MailKey{Rollout: Key{v.Cluster, v.Hash}, Kind: m.Kind, About: parts, To: r}.String()
			out = append(out, m)
		}
	}
	add(Mail{Kind: MailApplying}, all)
	switch v.Verdict {
	case VerdictApplied:
		add(Mail{Kind: MailApplied}, all)
	case VerdictStuck:
		add(Mail{Kind: MailStuck}, all)
	}
	for _, f := range v.Failures {
		rcpts := recipients(to, routes, f.Layer)
		if f.Class == FailurePrune && len(f.Objects) > 0 {
			for _, o := range f.Objects {
				o := o
				add(Mail{Kind: MailPruneFailed, Layer: f.Layer, Object: &o}, rcpts,
					f.Layer, o.Kind+"/"+o.Namespace+"/"+o.Name)
			}
			continue
		}
		if f.Release != (Ref{}) {
			add(Mail{Kind: MailFailed, Layer: f.Layer, Release: f.Release, Reason: f.Reason}, rcpts, f.Layer, f.Release.String(), f.Reason)
			continue
		}
		add(Mail{Kind: MailFailed, Layer: f.Layer, Reason: f.Reason}, rcpts, f.Layer, f.Reason)
	}
	return out
}

// recipients of a mail about one layer, or about the whole rollout when
// layer is empty.
func recipients(to []string, routes routing, layer string) []string {
	out := slices.Clone(to)
	if layer == "" {
		out = append(out, routes.all...)
	} else {
		out = append(out, routes.byName[layer]...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ParseRecipients splits a comma list of addresses, dropping blanks.
func ParseRecipients(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
