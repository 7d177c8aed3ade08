// Package teams shows the verdicts that matter in Microsoft Teams: one
// Adaptive Card per change (applied, failed, stuck by default), POSTed to
// a Workflows (Power Automate) webhook, whose trigger "When a Teams
// webhook request is received" posts it in a channel. Teams' webhooks
// cannot update a message, so applying is not posted there by default.
// The webhook's URL is its secret: read from a file, never logged, cut
// out of every error.
package teams

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// Options configure the deliverer.
type Options struct {
	// URLs is the file of the webhooks' URLs: a line URL is every
	// cluster's, a line cluster=URL one cluster's; # begins a comment.
	// Read again when it changes.
	URLs  *secret.File
	Links channel.Links
	HTTP  *http.Client
	Now   func() time.Time
	Log   *slog.Logger
}

// Teams is the deliverer (outbox.Deliverer).
type Teams struct{ o Options }

// New makes the deliverer.
func New(o Options) *Teams { return &Teams{o: o} }

// Name names it in logs, metrics and pages.
func (t *Teams) Name() string { return "teams" }

// ParseURLs reads the file's lines: the URL of every cluster ("" when
// none) and those of single clusters.
func ParseURLs(s string) (def string, byCluster map[string]string, err error) {
	byCluster = map[string]string{}
	for i, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cluster, raw := "", line
		if !strings.HasPrefix(line, "https://") && !strings.HasPrefix(line, "http://") {
			var ok bool
			if cluster, raw, ok = strings.Cut(line, "="); !ok || cluster == "" {
				return "", nil, fmt.Errorf("line %d: neither a URL nor cluster=URL", i+1)
			}
		}
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			// Not the line itself: it is a secret.
			return "", nil, fmt.Errorf("line %d: not an http(s) URL", i+1)
		}
		if cluster == "" {
			def = u.String()
		} else {
			byCluster[strings.TrimSpace(cluster)] = u.String()
		}
	}
	if def == "" && len(byCluster) == 0 {
		return "", nil, errors.New("no webhook URL")
	}
	return def, byCluster, nil
}

// Deliver posts p's card to its cluster's webhook.
func (t *Teams) Deliver(ctx context.Context, p outbox.Publication, _ func(string)) error {
	if p.Shown == (rollout.Shown{}) {
		return outbox.Skip("the rollout is no longer known (collected)")
	}
	raw, err := t.o.URLs.Get()
	if err != nil {
		return &outbox.Error{Retry: true, Message: err.Error()}
	}
	def, byCluster, err := ParseURLs(raw)
	if err != nil {
		return &outbox.Error{Retry: true, Message: "the Teams webhook file: " + err.Error()}
	}
	hook, ok := byCluster[p.Key.Cluster]
	if !ok {
		hook = def
	}
	if hook == "" {
		return outbox.Skip("no Teams webhook for cluster " + p.Key.Cluster)
	}
	body, err := json.Marshal(Message(channel.Of(p, t.o.Links)))
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook, bytes.NewReader(body))
	if err != nil {
		return &outbox.Error{Message: "the Teams webhook's URL is not valid"}
	}
	req.Header.Set("Content-Type", "application/json")
	if err := outbox.Send(t.o.HTTP, req, "Teams", t.o.Now); err != nil {
		return err // its URL, a secret, named nowhere
	}
	t.o.Log.Info("verdict posted to Teams", "cluster", p.Key.Cluster, "hash", p.Key.Hash, "verdict", p.Verdict.String())
	return nil
}
