package slack_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/channeltest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/slack"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/slack/slacktest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// rig is Slack's dispatcher on a real store, against the contract server.
type rig struct {
	*channeltest.Rig
	srv   *slacktest.Server
	token string // the token file's path
}

const hash = channeltest.Hash

var t0 = channeltest.T0

func newRig(t *testing.T, channels map[string]string) *rig {
	t.Helper()
	r := &rig{Rig: channeltest.New(t, outbox.Channel{Name: "slack", Restate: true, Progress: true})}
	r.Pace = slack.Pace
	r.srv = slacktest.New("xoxb-1", r.Clock.Now, "deploys", "staging-deploys")
	t.Cleanup(r.srv.Close)
	r.token = filepath.Join(t.TempDir(), "token")
	r.writeToken("xoxb-1")
	tok, err := secret.NewFile(r.token, "Slack token")
	if err != nil {
		t.Fatal(err)
	}
	r.Dispatch(slack.New(slack.Options{APIURL: r.srv.URL, Token: tok, Channel: "#deploys", Channels: channels,
		Links: channeltest.Links(), HTTP: r.srv.Client(), Now: r.Clock.Now, Log: r.Logger}))
	t.Cleanup(func() {
		if v := r.srv.Violations(); len(v) > 0 {
			t.Errorf("requests that break Slack's contract: %q", v)
		}
	})
	return r
}

func (r *rig) writeToken(tok string) {
	r.T.Helper()
	if err := os.WriteFile(r.token, []byte(tok+"\n"), 0o600); err != nil {
		r.T.Fatal(err)
	}
}

// text is everything a message shows, its blocks' text joined.
func text(m slacktest.Message) string {
	var b strings.Builder
	for _, bl := range m.Blocks {
		if bl.Text != nil {
			b.WriteString(bl.Text.Text + "\n")
		}
		for _, e := range bl.Elements {
			b.WriteString(e.Text + "\n")
		}
	}
	return b.String()
}

// TestOneMessageUpdatedInPlace: one message per commit and cluster,
// posted while applying, updated as layers apply and as the verdict
// changes; a failure replies once in its thread, a restated one updates
// the message without replying again.
func TestOneMessageUpdatedInPlace(t *testing.T) {
	r := newRig(t, nil)
	r.Publish("prod", rollout.VerdictApplying, rollout.Shown{Done: 0, Expected: 3})
	r.FlushAll()
	msgs := r.srv.Messages("deploys")
	if len(msgs) != 1 || !strings.Contains(text(msgs[0]), "0 of 3 layers applied it") || !strings.Contains(msgs[0].Text, "Applying 0123456 on prod") {
		t.Fatalf("after applying: %+v", msgs)
	}
	if !strings.Contains(text(msgs[0]), "<https://github.com/acme/app/commit/"+hash+"|commit 0123456>") ||
		!strings.Contains(text(msgs[0]), "<https://fdn.example.com/ui/prod/"+hash+"|status page>") {
		t.Errorf("the message does not link the commit and the status page:\n%s", text(msgs[0]))
	}
	r.Publish("prod", rollout.VerdictApplying, rollout.Shown{Done: 1, Expected: 3}, channeltest.Progress)
	r.Publish("prod", rollout.VerdictApplying, rollout.Shown{Done: 2, Expected: 3}, channeltest.Progress)
	// Progress waits Pace after the last update, then the latest goes.
	if next := r.Flush(); !next.Equal(t0.Add(slack.Pace)) || r.srv.Messages("deploys")[0].Updates != 0 {
		t.Fatalf("progress within Pace: next %v, updates %d", next, r.srv.Messages("deploys")[0].Updates)
	}
	r.Clock.Add(slack.Pace)
	r.FlushAll()
	if m := r.srv.Messages("deploys")[0]; m.Updates != 1 || !strings.Contains(text(m), "2 of 3 layers applied it") {
		t.Fatalf("after Pace: %+v", m)
	}
	// A new verdict goes at once.
	r.Publish("prod", rollout.VerdictFailed, rollout.Shown{Done: 2, Expected: 3, Failure: rollout.ShownFailure{
		Layer: "flux-system/apps", Release: rollout.Ref{Kind: "HelmRelease", Namespace: "web", Name: "frontend"},
		Reason: "InstallFailed", Message: "context deadline exceeded"}})
	r.FlushAll()
	msgs = r.srv.Messages("deploys")
	if len(msgs) != 2 || msgs[0].Updates != 2 || msgs[1].ThreadTS != msgs[0].TS {
		t.Fatalf("want the message updated twice and one reply in its thread: %+v", msgs)
	}
	for _, want := range []string{"❌ Failed 0123456 on prod", "Layer flux-system/apps: HelmRelease web/frontend InstallFailed", "context deadline exceeded", "2 of 3 layers applied it"} {
		if !strings.Contains(text(msgs[0]), want) {
			t.Errorf("the failed message does not say %q:\n%s", want, text(msgs[0]))
		}
	}
	if !strings.Contains(text(msgs[1]), "Failed on prod: Layer flux-system/apps") {
		t.Errorf("the reply: %s", text(msgs[1]))
	}
	r.Publish("prod", rollout.VerdictFailed, rollout.Shown{Done: 2, Expected: 3, Failure: rollout.ShownFailure{
		Layer: "flux-system/apps", Release: rollout.Ref{Kind: "HelmRelease", Namespace: "web", Name: "frontend"}, Reason: "InstallFailed", Stalled: true}}, channeltest.Restate)
	r.Clock.Add(slack.Pace) // a restated failure is paced as progress is
	r.FlushAll()
	msgs = r.srv.Messages("deploys")
	if len(msgs) != 2 || msgs[0].Updates != 3 || !strings.Contains(text(msgs[0]), "a new commit is needed") {
		t.Fatalf("a restated failure updates the message and does not reply again: %+v", msgs)
	}
	if got := r.Record("prod"); got.Ref != msgs[0].Channel+" "+msgs[0].TS || got.Due() {
		t.Errorf("record %+v", got)
	}
}

// TestChannelPerCluster: a cluster's mapping, else the default channel;
// the applied message says when.
func TestChannelPerCluster(t *testing.T) {
	r := newRig(t, map[string]string{"staging": "#staging-deploys"})
	r.Publish("staging", rollout.VerdictApplied, rollout.Shown{Done: 3, Expected: 3, Completed: t0.Add(-time.Minute)})
	r.Publish("prod", rollout.VerdictApplied, rollout.Shown{Done: 3, Expected: 3, Completed: t0, Late: true})
	r.FlushAll()
	st, pr := r.srv.Messages("staging-deploys"), r.srv.Messages("deploys")
	if len(st) != 1 || len(pr) != 1 {
		t.Fatalf("staging %+v, prod %+v", st, pr)
	}
	if !strings.Contains(text(st[0]), "Applied at 2026-12-06 09:59:00 UTC") || !strings.Contains(text(pr[0]), "after the deadline") {
		t.Errorf("applied messages:\n%s\n%s", text(st[0]), text(pr[0]))
	}
}

// TestStorm429: a storm of 429s: no request before Retry-After (counted
// from the answer), the burst stops, everything goes out after.
func TestStorm429(t *testing.T) {
	r := newRig(t, nil)
	r.srv.Limit(3, 30*time.Second)
	for _, c := range []string{"prod", "staging", "dev"} {
		r.Publish(c, rollout.VerdictApplying, rollout.Shown{Expected: 2})
	}
	for i := 0; i < 3; i++ {
		next := r.Flush()
		if want := r.Clock.Now().Add(30 * time.Second); !next.Equal(want) {
			t.Fatalf("round %d: next attempt %v, want %v (Retry-After from the answer)", i, next, want)
		}
		if r.Flush(); r.srv.Calls("chat.postMessage") != i+1 {
			t.Fatalf("a request before Retry-After: %d calls", r.srv.Calls("chat.postMessage"))
		}
		r.Clock.Add(30 * time.Second)
	}
	r.FlushAll()
	if n := len(r.srv.Messages("deploys")); n != 3 {
		t.Fatalf("%d messages after the storm, want 3", n)
	}
	if !strings.Contains(r.Log.String(), "rate limited") {
		t.Error("the rate limit is not logged")
	}
}

// TestRefusedForGood: Slack's refusals that no retry mends are
// dead-lettered with Slack's words and said in the warning; a transient
// one is retried.
func TestRefusedForGood(t *testing.T) {
	for _, c := range []struct {
		refuse string
		dead   bool
	}{{"invalid_auth", true}, {"channel_not_found", true}, {"not_in_channel", true}, {"internal_error", false}} {
		t.Run(c.refuse, func(t *testing.T) {
			r := newRig(t, nil)
			r.srv.Refuse(c.refuse)
			r.Publish("prod", rollout.VerdictApplying, rollout.Shown{Expected: 2})
			next := r.Flush()
			p := r.Record("prod")
			if p.Dead != c.dead || !strings.Contains(p.LastError, "Slack: "+c.refuse) || next.IsZero() == !c.dead {
				t.Fatalf("record %+v, next %v", p, next)
			}
			if c.dead && !strings.Contains(r.D.Warning(), "slack: verdicts refused for good") {
				t.Errorf("warning %q", r.D.Warning())
			}
		})
	}
}

// TestMessageDeleted: a message deleted in Slack is posted again at the
// next change.
func TestMessageDeleted(t *testing.T) {
	r := newRig(t, nil)
	r.Publish("prod", rollout.VerdictApplying, rollout.Shown{Expected: 2})
	r.FlushAll()
	m := r.srv.Messages("deploys")[0]
	r.srv.Delete(m.Channel, m.TS)
	r.Publish("prod", rollout.VerdictApplied, rollout.Shown{Done: 2, Expected: 2, Completed: t0})
	if next := r.Flush(); next.IsZero() {
		t.Fatal("a message gone is not tried again")
	}
	r.Clock.Add(time.Minute)
	r.FlushAll()
	if msgs := r.srv.Messages("deploys"); len(msgs) != 1 || !strings.Contains(msgs[0].Text, "Applied") {
		t.Fatalf("messages %+v", msgs)
	}
}

// TestTokenRotated: a token written to the file is used at the next
// delivery, and never logged.
func TestTokenRotated(t *testing.T) {
	r := newRig(t, nil)
	r.srv.SetToken("xoxb-2-secret")
	r.Publish("prod", rollout.VerdictApplying, rollout.Shown{Expected: 2})
	if r.Flush(); !r.Record("prod").Dead {
		t.Fatal("the old token is taken")
	}
	r.writeToken("xoxb-2-secret") // another size: read again whatever the file system's mtime granularity
	r.Publish("prod", rollout.VerdictApplied, rollout.Shown{Done: 2, Expected: 2, Completed: t0})
	r.FlushAll()
	if len(r.srv.Messages("deploys")) != 1 {
		t.Fatal("the rotated token is not used")
	}
	if strings.Contains(r.Log.String(), "xoxb") {
		t.Errorf("the token is logged:\n%s", r.Log.String())
	}
}

// TestHostileText: what Flux and the cluster wrote (mentions, links,
// mrkdwn, HTML) reaches Slack as plain_text, never as markup; the
// fallback text is escaped.
func TestHostileText(t *testing.T) {
	r := newRig(t, nil)
	hostile := "<!channel> *bold* _it_ ~s~ `code` <https://evil.example|click> <b>html</b> & [md](https://evil.example)"
	cluster := "prod<!here>*x*"
	r.Publish(cluster, rollout.VerdictFailed, rollout.Shown{Done: 1, Expected: 2, Failure: rollout.ShownFailure{
		Layer: "ns/" + hostile, Object: "ConfigMap/ns/" + hostile, Reason: hostile, Message: hostile}})
	r.FlushAll()
	msgs := r.srv.Messages("deploys")
	if len(msgs) != 2 {
		t.Fatalf("messages %+v", msgs)
	}
	for _, m := range msgs {
		if strings.Contains(m.Text, "<!") || strings.Contains(m.Text, "<https://evil") {
			t.Errorf("the fallback text carries a mention or link: %q", m.Text)
		}
		for _, b := range m.Blocks {
			objs := append([]slacktest.TextObject{}, b.Elements...)
			if b.Text != nil {
				objs = append(objs, *b.Text)
			}
			for _, o := range objs {
				if o.Type == "mrkdwn" && (strings.Contains(o.Text, "evil") || strings.Contains(o.Text, "<!")) {
					t.Errorf("hostile text in mrkdwn: %q", o.Text)
				}
				if o.Type == "plain_text" && o.Emoji != nil && *o.Emoji {
					t.Errorf("plain_text with emoji on turns :codes: into emoji: %q", o.Text)
				}
			}
		}
		if !strings.Contains(text(m), hostile) {
			t.Errorf("Flux's text is not shown as it is:\n%s", text(m))
		}
	}
}
