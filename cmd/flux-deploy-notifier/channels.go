package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/chat"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/chat/slack"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/chat/teams"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cloudevent"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ui"
)

// channelsConfig is the part of serve's configuration that shows the
// verdicts in chats (Slack, Teams) and to a signed webhook.
type channelsConfig struct {
	slackToken    *string
	slackChannel  *string
	slackChannels *string
	slackAPI      *string
	teamsFile     *string
	teamsVerdicts *string
	webhookURL    *string
	webhookSecret *string
	alertAfter    *time.Duration

	slackMap  map[string]string
	teamsSkip []rollout.Verdict
}

func (c *channelsConfig) flags(f *flags) {
	c.slackToken = f.String("slack-token-file", "FDN_SLACK_TOKEN_FILE", "", "file holding a Slack bot token (scope chat:write): one message per commit and cluster, updated in place")
	c.slackChannel = f.String("slack-channel", "FDN_SLACK_CHANNEL", "", "Slack channel of every cluster's messages (an id, or #name), unless --slack-channels names another")
	c.slackChannels = f.String("slack-channels", "FDN_SLACK_CHANNELS", "", "Slack channels by cluster: cluster=channel,...")
	c.slackAPI = f.String("slack-api-url", "FDN_SLACK_API_URL", slack.DefaultAPIURL, "Slack's Web API (another for an egress proxy)")
	c.teamsFile = f.String("teams-webhook-file", "FDN_TEAMS_WEBHOOK_FILE", "", "file of Teams Workflows webhook URLs (each a secret): a line URL for every cluster, cluster=URL for one")
	c.teamsVerdicts = f.String("teams-verdicts", "FDN_TEAMS_VERDICTS", "applied,failed,stuck", "the verdicts posted to Teams, one card each (its messages cannot be updated)")
	c.webhookURL = f.String("webhook-url", "FDN_WEBHOOK_URL", "", "each verdict change is POSTed here as a signed CloudEvent")
	c.webhookSecret = f.String("webhook-secret-file", "FDN_WEBHOOK_SECRET_FILE", "", "file holding the webhook's HMAC key (its bytes, as generic-hmac's token): X-Signature: sha256=<hex>")
	c.alertAfter = f.Duration("notify-alert-after", "FDN_NOTIFY_ALERT_AFTER", 15*time.Minute, "a verdict Slack, Teams or the webhook has not taken for longer is reported: a /readyz warning")
}

// finish validates the flags once parsed.
func (c *channelsConfig) finish() error {
	var err error
	if c.slackMap, err = pairs("--slack-channels", *c.slackChannels, "cluster=channel"); err != nil {
		return err
	}
	if *c.slackToken == "" && (*c.slackChannel != "" || len(c.slackMap) > 0) {
		return errors.New("--slack-channel and --slack-channels need --slack-token-file")
	}
	if *c.slackToken != "" && *c.slackChannel == "" && len(c.slackMap) == 0 {
		return errors.New("--slack-token-file needs --slack-channel or --slack-channels")
	}
	if *c.teamsFile != "" {
		f, err := secret.NewFile(*c.teamsFile, "Teams webhook file")
		if err != nil {
			return err
		}
		raw, _ := f.Get()
		if _, _, err := teams.ParseURLs(raw); err != nil {
			return fmt.Errorf("--teams-webhook-file: %w", err)
		}
	}
	want := map[rollout.Verdict]bool{}
	for _, name := range strings.Split(*c.teamsVerdicts, ",") {
		var v rollout.Verdict
		if err := v.UnmarshalText([]byte(strings.TrimSpace(name))); err != nil || v == rollout.VerdictUnknown {
			return fmt.Errorf("--teams-verdicts: %q is not applying, applied, failed, stuck or superseded", name)
		}
		want[v] = true
	}
	c.teamsSkip = nil
	for _, v := range []rollout.Verdict{rollout.VerdictApplying, rollout.VerdictApplied, rollout.VerdictFailed, rollout.VerdictStuck, rollout.VerdictSuperseded} {
		if !want[v] {
			c.teamsSkip = append(c.teamsSkip, v)
		}
	}
	if (*c.webhookURL == "") != (*c.webhookSecret == "") {
		return errors.New("--webhook-url and --webhook-secret-file go together: every event is signed")
	}
	if *c.webhookURL != "" {
		if u, err := url.Parse(*c.webhookURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return errors.New("--webhook-url: not an http(s) URL")
		}
	}
	if *c.alertAfter <= 0 {
		return fmt.Errorf("--notify-alert-after must be positive, got %s", *c.alertAfter)
	}
	return nil
}

// specs are the outboxes of the channels configured.
func (c *channelsConfig) specs() []outbox.Channel {
	var out []outbox.Channel
	if *c.slackToken != "" {
		out = append(out, outbox.Channel{Name: "slack", Restate: true, Progress: true})
	}
	if *c.teamsFile != "" {
		out = append(out, outbox.Channel{Name: "teams", Skip: c.teamsSkip})
	}
	if *c.webhookURL != "" {
		out = append(out, outbox.Channel{Name: "webhook"})
	}
	return out
}

// specs are the outboxes of every channel configured: the forge's, the
// chats', the webhook's.
func (c *serveConfig) specs() []outbox.Channel {
	var out []outbox.Channel
	if c.forge.enabled() {
		out = append(out, outbox.ForgeChannel())
	}
	return append(out, c.channels.specs()...)
}

// links are what a chat message links to: the commit in its forge (the
// configured forge's repository of its source, else the repository its
// source names in the cluster), and the rollout's page with
// --external-url.
func (c *serveConfig) links(sourceURL func(kind, ns, name string) (string, bool)) chat.Links {
	var l chat.Links
	if ext := strings.TrimRight(*c.mail.externalURL, "/"); ext != "" {
		l.Page = func(k rollout.Key) string { return ext + edge.RolloutPath(k) }
	}
	l.Commit = func(src rollout.Ref, commit string) string {
		if c.forge.enabled() {
			if r, err := c.forge.repos.Repo(src); err == nil && c.forge.repos.Host != "" {
				return "https://" + c.forge.repos.Host + "/" + r.String() + "/commit/" + commit
			}
		}
		if src == (rollout.Ref{}) {
			return ""
		}
		raw, ok := sourceURL(src.Kind, src.Namespace, src.Name)
		if !ok {
			return ""
		}
		host, r, err := forge.ParseRepoURL(raw)
		if err != nil {
			return ""
		}
		return "https://" + host + "/" + r.String() + "/commit/" + commit
	}
	return l
}

// shownIn is a channel the verdicts are shown in, as serve runs it: its
// dispatcher, and what the pages say of it.
type shownIn struct {
	d  *outbox.Dispatcher
	ui ui.Channel
}

// dispatchers builds the dispatchers of the channels configured.
func (c *channelsConfig) dispatchers(db *store.DB, links chat.Links, log *slog.Logger, reg prometheus.Registerer) ([]shownIn, error) {
	hc := &http.Client{Timeout: 30 * time.Second}
	cfg := outbox.DispatchConfig{AlertAfter: *c.alertAfter, Log: log, Now: time.Now, Reg: reg}
	var out []shownIn
	if *c.slackToken != "" {
		tok, err := secret.NewFile(*c.slackToken, "Slack token")
		if err != nil {
			return nil, err
		}
		s := slack.New(slack.Options{APIURL: *c.slackAPI, Token: tok, Channel: *c.slackChannel, Channels: c.slackMap,
			Links: links, HTTP: hc, Now: time.Now, Log: log})
		paced := cfg
		paced.Pace = slack.Pace
		out = append(out, shownIn{
			d:  outbox.NewDispatcher(db.Channel("slack"), s, paced),
			ui: ui.Channel{Name: "Slack", Record: "message", Publication: db.Channel("slack").Publication},
		})
		log.Info("verdicts shown in Slack", "api", *c.slackAPI, "channel", *c.slackChannel, "mapped_clusters", len(c.slackMap))
	}
	if *c.teamsFile != "" {
		urls, err := secret.NewFile(*c.teamsFile, "Teams webhook file")
		if err != nil {
			return nil, err
		}
		t := teams.New(teams.Options{URLs: urls, Links: links, HTTP: hc, Now: time.Now, Log: log})
		out = append(out, shownIn{
			d:  outbox.NewDispatcher(db.Channel("teams"), t, cfg),
			ui: ui.Channel{Name: "Teams", Record: "card", Publication: db.Channel("teams").Publication},
		})
		log.Info("verdicts posted to Teams", "verdicts", *c.teamsVerdicts)
	}
	if *c.webhookURL != "" {
		key, err := secret.NewExactFile(*c.webhookSecret, "webhook secret")
		if err != nil {
			return nil, err
		}
		w := cloudevent.New(cloudevent.Options{URL: *c.webhookURL, Secret: key, Links: links, HTTP: hc, Now: time.Now, Log: log})
		out = append(out, shownIn{
			d:  outbox.NewDispatcher(db.Channel("webhook"), w, cfg),
			ui: ui.Channel{Name: "Webhook", Record: "event", Publication: db.Channel("webhook").Publication},
		})
		log.Info("verdicts posted as CloudEvents", "host", hostOf(*c.webhookURL))
	}
	return out, nil
}

// hostOf is a URL's host, what the log says of it (its path and query
// may hold a secret).
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Host
}

// pairs reads key=value,... (a flag's mapping by cluster or source).
func pairs(flag, s, form string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if k, v = strings.TrimSpace(k), strings.TrimSpace(v); !ok || k == "" || v == "" {
			return nil, fmt.Errorf("%s: %q is not %s", flag, kv, form)
		}
		out[k] = v
	}
	return out, nil
}
