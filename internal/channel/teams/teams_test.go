package teams_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/channeltest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/teams"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/teams/teamstest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// spec is Teams' outbox as serve configures it by default: applied,
// failed and stuck.
var spec = outbox.Channel{Name: "teams", Skip: []rollout.Verdict{rollout.VerdictApplying, rollout.VerdictSuperseded}}

type rig struct {
	*channeltest.Rig
	srv *teamstest.Server
}

// newRig writes the webhook file (lines: the server's hooks by name) and
// dispatches to it.
func newRig(t *testing.T, lines ...string) *rig {
	t.Helper()
	r := &rig{Rig: channeltest.New(t, spec)}
	r.srv = teamstest.New(r.Clock.Now)
	t.Cleanup(r.srv.Close)
	for i, l := range lines {
		if k, name, ok := strings.Cut(l, "="); ok {
			lines[i] = k + "=" + r.srv.Hook(name)
		} else {
			lines[i] = r.srv.Hook(l)
		}
	}
	path := filepath.Join(t.TempDir(), "teams")
	if err := os.WriteFile(path, []byte("# the channels' workflows\n"+strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	urls, err := secret.NewFile(path, "Teams webhook")
	if err != nil {
		t.Fatal(err)
	}
	r.Dispatch(teams.New(teams.Options{URLs: urls, Links: channeltest.Links(), HTTP: r.srv.Client(), Now: r.Clock.Now, Log: r.Logger}))
	t.Cleanup(func() {
		if v := r.srv.Violations(); len(v) > 0 {
			t.Errorf("requests that break the webhook's contract: %q", v)
		}
		if strings.Contains(r.Log.String(), "sig=") {
			t.Errorf("a webhook's URL is logged:\n%s", r.Log.String())
		}
	})
	return r
}

// TestCardPerVerdictThatMatters: applying is not posted (a card cannot be
// updated); applied, failed and stuck each post one card to the cluster's
// webhook, with what failed and the links.
func TestCardPerVerdictThatMatters(t *testing.T) {
	r := newRig(t, "ops", "staging=staging")
	r.Publish("prod", rollout.VerdictApplying, rollout.Shown{Expected: 3})
	r.FlushAll()
	if n := len(r.srv.Cards("ops")); n != 0 {
		t.Fatalf("%d cards while applying", n)
	}
	r.Publish("prod", rollout.VerdictFailed, rollout.Shown{Done: 1, Expected: 3, Failure: rollout.ShownFailure{
		Layer: "flux-system/apps", Object: "Deployment/web/frontend", Reason: "HealthCheckFailed", Message: "timeout waiting for: [Deployment/web/frontend status: 'InProgress']"}})
	r.Publish("staging", rollout.VerdictApplied, rollout.Shown{Done: 3, Expected: 3, Completed: channeltest.T0})
	r.FlushAll()
	ops, staging := r.srv.Cards("ops"), r.srv.Cards("staging")
	if len(ops) != 1 || len(staging) != 1 {
		t.Fatalf("ops %+v, staging %+v", ops, staging)
	}
	for _, want := range []string{"Failed 0123456 on prod", "Layer flux-system/apps: Deployment/web/frontend HealthCheckFailed", "timeout waiting for", "1 of 3 layers applied it"} {
		if !strings.Contains(ops[0].Text(), want) {
			t.Errorf("the failed card does not say %q:\n%s", want, ops[0].Text())
		}
	}
	if len(ops[0].Actions) != 2 || ops[0].Actions[1].URL != "https://fdn.example.com/ui/prod/"+channeltest.Hash {
		t.Errorf("actions %+v", ops[0].Actions)
	}
	if !strings.Contains(staging[0].Text(), "Applied at 2026-12-06 10:00:00 UTC") {
		t.Errorf("the applied card:\n%s", staging[0].Text())
	}
}

// TestNoWebhookForTheCluster: a cluster without a webhook (no default
// line) is recorded as not shown.
func TestNoWebhookForTheCluster(t *testing.T) {
	r := newRig(t, "staging=staging")
	r.Publish("prod", rollout.VerdictApplied, rollout.Shown{Done: 1, Expected: 1, Completed: channeltest.T0})
	r.FlushAll()
	if p := r.Record("prod"); !strings.Contains(p.LastError, "no Teams webhook for cluster prod") {
		t.Fatalf("record %+v", p)
	}
}

// TestTeamsRefusals: 429 waits as Retry-After says; 5xx is retried; a
// webhook gone (404) or refused (401) is dead-lettered, the URL named
// nowhere.
func TestTeamsRefusals(t *testing.T) {
	r := newRig(t, "ops")
	r.srv.Answer(http.StatusTooManyRequests, http.StatusBadGateway, http.StatusNotFound)
	r.Publish("prod", rollout.VerdictStuck, rollout.Shown{Done: 1, Expected: 3, RootCause: "flux-system/infra"})
	if next := r.Flush(); !next.Equal(r.Clock.Now().Add(30 * time.Second)) {
		t.Fatalf("after a 429: next %v", next)
	}
	r.Clock.Add(30 * time.Second)
	if next := r.Flush(); next.IsZero() {
		t.Fatal("a 502 is not retried")
	}
	r.Clock.Add(time.Hour)
	r.Flush()
	if p := r.Record("prod"); !p.Dead || strings.Contains(p.LastError, "sig=") {
		t.Fatalf("record %+v: want dead-lettered, the URL not in it", p)
	}
	r.Publish("prod", rollout.VerdictApplied, rollout.Shown{Done: 3, Expected: 3, Completed: r.Clock.Now()})
	r.FlushAll()
	if c := r.srv.Cards("ops"); len(c) != 1 || !strings.Contains(c[0].Text(), "Applied") {
		t.Fatalf("cards %+v", c)
	}
}

// TestUnreachableWebhookNamesNoURL: a network error names no part of
// the URL, which is the webhook's secret.
func TestUnreachableWebhookNamesNoURL(t *testing.T) {
	r := newRig(t, "ops")
	r.srv.Close()
	r.Publish("prod", rollout.VerdictApplied, rollout.Shown{Done: 1, Expected: 1, Completed: channeltest.T0})
	if next := r.Flush(); next.IsZero() {
		t.Fatal("a network error is not retried")
	}
	if p := r.Record("prod"); p.LastError == "" || strings.Contains(p.LastError, "sig=") || strings.Contains(p.LastError, "workflows") {
		t.Fatalf("last error %q", p.LastError)
	}
}

// TestHostileTextInCards: what Flux wrote is a TextRun, which Teams shows
// as it is (the contract server refuses any TextBlock, whose text is
// Markdown).
func TestHostileTextInCards(t *testing.T) {
	r := newRig(t, "ops")
	hostile := "**bold** [link](https://evil.example) <at>everyone</at> <b>html</b>"
	r.Publish("prod"+hostile, rollout.VerdictFailed, rollout.Shown{Done: 1, Expected: 2, Failure: rollout.ShownFailure{Layer: hostile, Reason: hostile, Message: hostile}})
	r.FlushAll()
	c := r.srv.Cards("ops")
	if len(c) != 1 || strings.Count(c[0].Text(), hostile) < 3 {
		t.Fatalf("cards %+v", c)
	}
}

func TestParseURLs(t *testing.T) {
	def, by, err := teams.ParseURLs("# c\nhttps://a.example/x?sig=1\n\nprod = https://b.example/y?sig=2\n")
	if err != nil || def != "https://a.example/x?sig=1" || by["prod"] != "https://b.example/y?sig=2" {
		t.Fatalf("%q %v %v", def, by, err)
	}
	for _, bad := range []string{"", "# only a comment", "prod", "prod=ftp://x", "=https://x"} {
		if _, _, err := teams.ParseURLs(bad); err == nil || strings.Contains(err.Error(), "x") && strings.Contains(bad, "ftp://x") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
