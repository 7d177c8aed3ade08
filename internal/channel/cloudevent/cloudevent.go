// Package cloudevent POSTs each verdict change to a webhook as a
// CloudEvent (structured mode of the HTTP binding: the event as JSON,
// Content-Type application/cloudevents+json), signed as
// notification-controller's generic-hmac provider signs (X-Signature:
// sha256=<hex HMAC-SHA256 of the body>), so that the same receivers can
// check it. The event's id is its idempotency key (also in
// Idempotency-Key): a delivery repeated after a crash or a lost answer
// carries the same id. Events are built and encoded by
// github.com/cloudevents/sdk-go's event package.
package cloudevent

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
)

// TypePrefix begins every event's type: TypePrefix + the verdict
// (dev.fluxdeploy.rollout.applied).
const TypePrefix = "dev.fluxdeploy.rollout."

// ContentType is structured mode's.
const ContentType = "application/cloudevents+json; charset=utf-8"

// Options configure the deliverer.
type Options struct {
	URL    string
	Secret *secret.File // the HMAC key: the file's bytes
	Links  channel.Links
	HTTP   *http.Client
	Now    func() time.Time
	Log    *slog.Logger
}

// Webhook is the deliverer (outbox.Deliverer).
type Webhook struct{ o Options }

// New makes the deliverer.
func New(o Options) *Webhook { return &Webhook{o: o} }

// Name names it in logs, metrics and pages.
func (w *Webhook) Name() string { return "webhook" }

// Data is an event's data: the rollout's verdict and what it says.
type Data struct {
	Cluster  string `json:"cluster"`
	Revision string `json:"revision"`
	Commit   string `json:"commit,omitempty"` // the git commit, when the revision names one
	Source   string `json:"source,omitempty"` // Kind/namespace/name
	Verdict  string `json:"verdict"`
	Summary  string `json:"summary"`
	// LayersApplied of LayersExpected applied it.
	LayersApplied  int        `json:"layers_applied"`
	LayersExpected int        `json:"layers_expected"`
	AppliedAt      *time.Time `json:"applied_at,omitempty"`
	Late           bool       `json:"late,omitempty"`
	Failure        *Failure   `json:"failure,omitempty"`
	StuckOn        string     `json:"stuck_on,omitempty"`      // stuck: the layer the others wait on
	SupersededBy   string     `json:"superseded_by,omitempty"` // superseded: the newer revision
	URL            string     `json:"url,omitempty"`           // the status page
	CommitURL      string     `json:"commit_url,omitempty"`
}

// Failure is what failed.
type Failure struct {
	Layer       string `json:"layer"`
	HelmRelease string `json:"helm_release,omitempty"` // namespace/name
	Object      string `json:"object,omitempty"`       // Kind/namespace/name
	Reason      string `json:"reason"`
	Message     string `json:"message,omitempty"`
	Stalled     bool   `json:"stalled,omitempty"`
}

// Event is the CloudEvent of p.
func (w *Webhook) Event(p outbox.Publication) (event.Event, error) {
	m := channel.Of(p, w.o.Links)
	d := Data{Cluster: p.Key.Cluster, Revision: p.Revision, Commit: p.Commit, Source: p.Source.String(), Verdict: p.Verdict.String(),
		Summary: p.Summary, LayersApplied: p.Done, LayersExpected: p.Expected, Late: p.Late, StuckOn: p.RootCause,
		SupersededBy: p.SupersededBy, URL: m.PageURL, CommitURL: m.CommitURL}
	if p.Verdict == rollout.VerdictApplied && !p.Completed.IsZero() {
		at := p.Completed.UTC()
		d.AppliedAt = &at
	}
	if f := m.Failure; f != nil {
		d.Failure = &Failure{Layer: f.Layer, Object: f.Object, Reason: f.Reason, Message: f.Message, Stalled: f.Stalled}
		if f.Release != (rollout.Ref{}) {
			d.Failure.HelmRelease = f.Release.Namespace + "/" + f.Release.Name
		}
	}
	e := event.New(event.CloudEventsVersionV1)
	e.SetID(ID(p))
	e.SetSource("/clusters/" + url.PathEscape(p.Key.Cluster))
	e.SetType(TypePrefix + p.Verdict.String())
	// People know a rollout by its commit (an OCI artifact's origin), not
	// by its revision's hash; a revision that names none, by that hash.
	if p.Commit != "" {
		e.SetSubject(p.Commit)
	} else {
		e.SetSubject(p.Key.Hash)
	}
	e.SetTime(p.Changed.UTC())
	if err := e.SetData(event.ApplicationJSON, d); err != nil {
		return e, err
	}
	return e, e.Validate()
}

// ID is p's event id: the rollout and the number of its verdict, the
// same each time this verdict is delivered again.
func ID(p outbox.Publication) string {
	return p.Key.Hash + "." + strconv.FormatUint(p.Seq, 10)
}

// Deliver POSTs p's event.
func (w *Webhook) Deliver(ctx context.Context, p outbox.Publication, _ func(string)) error {
	if p.Shown == (rollout.Shown{}) {
		return outbox.Skip("the rollout is no longer known (collected)")
	}
	e, err := w.Event(p)
	if err != nil {
		return &outbox.Error{Message: "the event: " + err.Error()}
	}
	body, err := e.MarshalJSON()
	if err != nil {
		return &outbox.Error{Message: "the event: " + err.Error()}
	}
	key, err := w.o.Secret.Get()
	if err != nil {
		return &outbox.Error{Retry: true, Message: err.Error()}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.o.URL, bytes.NewReader(body))
	if err != nil {
		return &outbox.Error{Message: "the webhook's URL: " + err.Error()}
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set(signature.Header, signature.Sign([]byte(key), body)) // generic-hmac's, as notification-controller's requests to this service
	req.Header.Set("Idempotency-Key", e.ID())
	req.Header.Set("User-Agent", "flux-deploy-notifier")
	if err := outbox.Send(w.o.HTTP, req, "webhook", w.o.Now); err != nil {
		return err
	}
	w.o.Log.Info("verdict posted to the webhook", "cluster", p.Key.Cluster, "hash", p.Key.Hash, "verdict", p.Verdict.String(), "id", e.ID())
	return nil
}
