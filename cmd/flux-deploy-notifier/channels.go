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

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/cloudevent"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/slack"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/teams"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ui"
)

// channelTable is every channel the verdicts are shown in besides mail,
// one row each, its flags registered on f: a new channel is its package
// (an outbox.Deliverer) and one row here. The store keeps its outbox
// under the row's name (its buckets are named after it), the one
// dispatcher delivers it, the pages show its record under the row's
// label and /readyz its warnings: nothing else names a channel. The
// flags are validated here, once: the channel packages know options, not
// flags. The forge's row is the forge chosen among forgeTable's (fc);
// alertAfter is --notify-alert-after, which the others share.
func channelTable(f *flags, fc *forgeConfig, alertAfter *time.Duration) []*channelRow {
	var rows []*channelRow
	for _, row := range channelRows() {
		rows = append(rows, row(f, fc, alertAfter))
	}
	return rows
}

// channelRows are the rows' constructors, each registering its flags.
func channelRows() []func(f *flags, fc *forgeConfig, alertAfter *time.Duration) *channelRow {
	return []func(*flags, *forgeConfig, *time.Duration) *channelRow{forgeChannelRow, slackRow, teamsRow, webhookRow}
}

// channelRow is one channel and its flags, once registered.
type channelRow struct {
	name   string        // its outbox's: the store's buckets are named after it
	label  func() string // as the pages name it ("Slack"; the forge's, the forge chosen)
	record string        // what it makes of a verdict, as the pages say ("message")
	// takes says which publications its outbox takes (its Name is the
	// row's); pace spaces the deliveries that only say more of the
	// verdict taken last (outbox.DispatchConfig.Pace).
	takes func() outbox.Channel
	pace  time.Duration
	// alertAfter: a verdict undelivered for longer is a /readyz warning.
	alertAfter *time.Duration
	// given reports whether its flags ask for it: it then shows the
	// verdicts. check validates its flags once parsed, given or not.
	given func() bool
	check func() error
	// open makes its Deliverer; counted, when set, makes counters of its
	// own of the outcomes of the deliverer named, besides
	// fdn_deliveries_total.
	open    func(channelEnv) (outbox.Deliverer, error)
	counted func(reg prometheus.Registerer, name string) func(outcome string)
}

// channelEnv is what a channel's constructor is given: the store (the
// forge's heads), what messages link to, HTTP, the log and the clock.
type channelEnv struct {
	db    *store.DB
	links channel.Links
	// sourceURL is what a source names in its cluster (its repository),
	// false without cluster access.
	sourceURL func(cluster, kind, ns, name string) (string, bool)
	hc        *http.Client
	log       *slog.Logger
	now       func() time.Time
}

// channelsConfig is the part of serve's configuration that shows the
// verdicts in the forge, the chats and to a signed webhook: the rows of
// channelTable, and the forge's configuration, which links read too.
type channelsConfig struct {
	rows       []*channelRow
	forge      *forgeConfig
	alertAfter *time.Duration
}

func (c *channelsConfig) flags(f *flags) {
	c.alertAfter = f.Duration("notify-alert-after", "FDN_NOTIFY_ALERT_AFTER", 15*time.Minute, "a verdict Slack, Teams or the webhook has not taken for longer is reported: a /readyz warning")
	c.forge = &forgeConfig{}
	c.rows = channelTable(f, c.forge, c.alertAfter)
}

// finish validates the flags once parsed.
func (c *channelsConfig) finish() error {
	for _, r := range c.rows {
		if err := r.check(); err != nil {
			return err
		}
	}
	if *c.alertAfter <= 0 {
		return fmt.Errorf("--notify-alert-after must be positive, got %s", *c.alertAfter)
	}
	return nil
}

// given are the rows whose flags ask for them.
func (c *channelsConfig) given() []*channelRow {
	var out []*channelRow
	for _, r := range c.rows {
		if r.given() {
			out = append(out, r)
		}
	}
	return out
}

// specs are the outboxes of the channels configured.
func (c *channelsConfig) specs() []outbox.Channel {
	var out []outbox.Channel
	for _, r := range c.given() {
		out = append(out, r.spec())
	}
	return out
}

// spec is the row's outbox: the publications it takes, under its name.
func (r *channelRow) spec() outbox.Channel {
	ch := r.takes()
	ch.Name = r.name
	return ch
}

// shownIn is a channel the verdicts are shown in, as serve runs it: its
// dispatcher, and what the pages say of it.
type shownIn struct {
	d  *outbox.Dispatcher
	ui ui.Channel
}

// dispatchers builds the dispatchers of the channels configured.
func (c *channelsConfig) dispatchers(env channelEnv, reg prometheus.Registerer) ([]shownIn, error) {
	var out []shownIn
	for _, r := range c.given() {
		to, err := r.open(env)
		if err != nil {
			return nil, err
		}
		cfg := outbox.DispatchConfig{AlertAfter: *r.alertAfter, Pace: r.pace, Takes: r.spec().Takes, Log: env.log, Now: env.now, Reg: reg}
		if r.counted != nil {
			cfg.Counted = r.counted(reg, to.Name())
		}
		box := env.db.Channel(r.name)
		out = append(out, shownIn{
			d:  outbox.NewDispatcher(box, to, cfg),
			ui: ui.Channel{Name: r.label(), Record: r.record, Publication: box.Publication},
		})
	}
	return out, nil
}

// forgeChannelRow is the forge's row: the forge whose credentials are
// given (forgeTable's rows, whose flags fc registers) shows each verdict
// as a deployment. It has its own --forge-alert-after.
func forgeChannelRow(f *flags, fc *forgeConfig, _ *time.Duration) *channelRow {
	fc.flags(f)
	return &channelRow{
		name: "forge", label: fc.name, record: "deployment", alertAfter: fc.alertAfter,
		takes: outbox.ForgeChannel, given: fc.enabled, check: fc.finish,
		open: fc.deliverer, counted: forge.Counted,
	}
}

func slackRow(f *flags, _ *forgeConfig, alertAfter *time.Duration) *channelRow {
	token := f.String("slack-token-file", "FDN_SLACK_TOKEN_FILE", "", "file holding a Slack bot token (scope chat:write): one message per commit and cluster, updated in place")
	everyCluster := f.String("slack-channel", "FDN_SLACK_CHANNEL", "", "Slack channel of every cluster's messages (an id, or #name), unless --slack-channels names another")
	channels := f.String("slack-channels", "FDN_SLACK_CHANNELS", "", "Slack channels by cluster: cluster=channel,...")
	api := f.String("slack-api-url", "FDN_SLACK_API_URL", slack.DefaultAPIURL, "Slack's Web API (another for an egress proxy)")
	var byCluster map[string]string
	return &channelRow{
		name: "slack", label: func() string { return "Slack" }, record: "message", alertAfter: alertAfter,
		// A message per rollout, updated in place: it takes progress and
		// restated failures, paced as Slack asks.
		takes: func() outbox.Channel { return outbox.Channel{Restate: true, Progress: true} }, pace: slack.Pace,
		given: func() bool { return *token != "" },
		check: func() error {
			var err error
			if byCluster, err = pairs("--slack-channels", *channels, "cluster=channel"); err != nil {
				return err
			}
			if *token == "" && (*everyCluster != "" || len(byCluster) > 0) {
				return errors.New("--slack-channel and --slack-channels need --slack-token-file")
			}
			if *token != "" && *everyCluster == "" && len(byCluster) == 0 {
				return errors.New("--slack-token-file needs --slack-channel or --slack-channels")
			}
			return nil
		},
		open: func(env channelEnv) (outbox.Deliverer, error) {
			tok, err := secret.NewFile(*token, "Slack token")
			if err != nil {
				return nil, err
			}
			env.log.Info("verdicts shown in Slack", "api", *api, "channel", *everyCluster, "mapped_clusters", len(byCluster))
			return slack.New(slack.Options{APIURL: *api, Token: tok, Channel: *everyCluster, Channels: byCluster,
				Links: env.links, HTTP: env.hc, Now: env.now, Log: env.log}), nil
		},
	}
}

func teamsRow(f *flags, _ *forgeConfig, alertAfter *time.Duration) *channelRow {
	file := f.String("teams-webhook-file", "FDN_TEAMS_WEBHOOK_FILE", "", "file of Teams Workflows webhook URLs (each a secret): a line URL for every cluster, cluster=URL for one")
	verdicts := f.String("teams-verdicts", "FDN_TEAMS_VERDICTS", "applied,failed,stuck", "the verdicts posted to Teams, one card each (its messages cannot be updated)")
	var skip []rollout.Verdict
	return &channelRow{
		name: "teams", label: func() string { return "Teams" }, record: "card", alertAfter: alertAfter,
		// A card per verdict that matters: never progress.
		takes: func() outbox.Channel { return outbox.Channel{Skip: skip} },
		given: func() bool { return *file != "" },
		check: func() error {
			if *file != "" {
				f, err := secret.NewFile(*file, "Teams webhook file")
				if err != nil {
					return err
				}
				raw, _ := f.Get()
				if _, _, err := teams.ParseURLs(raw); err != nil {
					return fmt.Errorf("--teams-webhook-file: %w", err)
				}
			}
			want := map[rollout.Verdict]bool{}
			for _, name := range strings.Split(*verdicts, ",") {
				var v rollout.Verdict
				if err := v.UnmarshalText([]byte(strings.TrimSpace(name))); err != nil || v == rollout.VerdictUnknown {
					return fmt.Errorf("--teams-verdicts: %q is not applying, applied, failed, stuck or superseded", name)
				}
				want[v] = true
			}
			skip = nil
			for _, v := range []rollout.Verdict{rollout.VerdictApplying, rollout.VerdictApplied, rollout.VerdictFailed, rollout.VerdictStuck, rollout.VerdictSuperseded} {
				if !want[v] {
					skip = append(skip, v)
				}
			}
			return nil
		},
		open: func(env channelEnv) (outbox.Deliverer, error) {
			urls, err := secret.NewFile(*file, "Teams webhook file")
			if err != nil {
				return nil, err
			}
			env.log.Info("verdicts posted to Teams", "verdicts", *verdicts)
			return teams.New(teams.Options{URLs: urls, Links: env.links, HTTP: env.hc, Now: env.now, Log: env.log}), nil
		},
	}
}

func webhookRow(f *flags, _ *forgeConfig, alertAfter *time.Duration) *channelRow {
	u := f.String("webhook-url", "FDN_WEBHOOK_URL", "", "each verdict change is POSTed here as a signed CloudEvent")
	keyFile := f.String("webhook-secret-file", "FDN_WEBHOOK_SECRET_FILE", "", "file holding the webhook's HMAC key (its bytes, as generic-hmac's token): X-Signature: sha256=<hex>")
	return &channelRow{
		name: "webhook", label: func() string { return "Webhook" }, record: "event", alertAfter: alertAfter,
		takes: func() outbox.Channel { return outbox.Channel{} }, // every verdict change
		given: func() bool { return *u != "" },
		check: func() error {
			if (*u == "") != (*keyFile == "") {
				return errors.New("--webhook-url and --webhook-secret-file go together: every event is signed")
			}
			if *u != "" {
				if p, err := url.Parse(*u); err != nil || (p.Scheme != "https" && p.Scheme != "http") || p.Host == "" {
					return errors.New("--webhook-url: not an http(s) URL")
				}
			}
			return nil
		},
		open: func(env channelEnv) (outbox.Deliverer, error) {
			key, err := secret.NewExactFile(*keyFile, "webhook secret")
			if err != nil {
				return nil, err
			}
			env.log.Info("verdicts posted as CloudEvents", "host", hostOf(*u))
			return cloudevent.New(cloudevent.Options{URL: *u, Secret: key, Links: env.links, HTTP: env.hc, Now: env.now, Log: env.log}), nil
		},
	}
}

// links are what a chat message links to: the commit in its forge (the
// configured forge's repository of its source, else the repository its
// source names in the cluster), and the rollout's page with
// --external-url.
func (c *serveConfig) links(sourceURL func(cluster, kind, ns, name string) (string, bool)) channel.Links {
	var l channel.Links
	if ext := strings.TrimRight(*c.mail.externalURL, "/"); ext != "" {
		l.Page = func(k rollout.Key) string { return ext + edge.RolloutPath(k) }
	}
	fc := c.channels.forge
	l.Commit = func(cluster string, src rollout.Ref, commit string) string {
		if fc.enabled() {
			if r, err := fc.repos.Repo(cluster, src); err == nil && fc.repos.Host != "" {
				return "https://" + fc.repos.Host + "/" + r.String() + "/commit/" + commit
			}
		}
		if src == (rollout.Ref{}) {
			return ""
		}
		raw, ok := sourceURL(cluster, src.Kind, src.Namespace, src.Name)
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
