// Package slack shows each rollout's verdict in Slack: one message per
// commit and cluster, posted when the rollout starts applying and updated
// in place (chat.update, by the channel and ts kept in the outbox's
// record) as the verdict changes; a failure also posts one reply in the
// message's thread, so that people are notified, not only shown. Through
// github.com/slack-go/slack, with a bot token (scope chat:write).
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// DefaultAPIURL is Slack's Web API.
const DefaultAPIURL = "https://slack.com/api/"

// Pace spaces the updates of a message that only say how many more
// layers applied it (outbox.DispatchConfig.Pace): Slack asks for about a
// message a second per channel, and a fleet's layers apply in bursts. A
// new verdict updates it at once.
const Pace = 5 * time.Second

// Options configure the deliverer.
type Options struct {
	APIURL string       // DefaultAPIURL, or an egress proxy's
	Token  *secret.File // the bot token, read again when it changes
	// Channel is where a cluster's messages go unless Channels names
	// another; "" with none: the cluster's verdicts are not shown.
	Channel  string
	Channels map[string]string // cluster -> channel (an id, or a name)
	Links    channel.Links
	HTTP     *http.Client
	Now      func() time.Time
	Log      *slog.Logger
}

// Slack is the deliverer (outbox.Deliverer).
type Slack struct{ o Options }

// New makes the deliverer.
func New(o Options) *Slack {
	if !strings.HasSuffix(o.APIURL, "/") {
		o.APIURL += "/" // slack-go appends the method's name
	}
	return &Slack{o: o}
}

// Name names it in logs, metrics and pages.
func (s *Slack) Name() string { return "slack" }

// Deliver posts p's message, or updates the one posted (p.Ref: "channel
// ts"), and replies in its thread when the verdict newly failed.
func (s *Slack) Deliver(ctx context.Context, p outbox.Publication, save func(string)) error {
	to, ok := s.o.Channels[p.Key.Cluster]
	if !ok {
		to = s.o.Channel
	}
	switch {
	case to == "":
		return outbox.Skip("no Slack channel for cluster " + p.Key.Cluster)
	case p.Shown == (rollout.Shown{}):
		return outbox.Skip("the rollout is no longer known (collected)")
	case p.Ref == "" && p.Verdict == rollout.VerdictSuperseded:
		// Replaced before its message was posted: nothing to update, and
		// a message of its own would only be noise beside the newer one's.
		return outbox.Skip("superseded before its message was posted")
	}
	token, err := s.o.Token.Get()
	if err != nil {
		return &outbox.Error{Retry: true, Message: err.Error()}
	}
	api := slack.New(token, slack.OptionAPIURL(s.o.APIURL), slack.OptionHTTPClient(s.o.HTTP))
	m := channel.Of(p, s.o.Links)
	msg := []slack.MsgOption{slack.MsgOptionText(m.Summary(), true), slack.MsgOptionBlocks(Blocks(m)...)}
	ref := p.Ref
	if ref == "" {
		id, ts, err := api.PostMessageContext(ctx, to, msg...)
		if err != nil {
			return s.classify(err)
		}
		ref = id + " " + ts
		save(ref)
	}
	id, ts, _ := strings.Cut(ref, " ")
	if p.Ref != "" {
		if _, _, _, err := api.UpdateMessageContext(ctx, id, ts, msg...); err != nil {
			return s.classify(err)
		}
	}
	if p.Verdict == rollout.VerdictFailed && p.Sent != rollout.VerdictFailed {
		reply := []slack.MsgOption{slack.MsgOptionTS(ts), slack.MsgOptionText(m.Summary(), true), slack.MsgOptionBlocks(ReplyBlocks(m)...)}
		if _, _, err := api.PostMessageContext(ctx, id, reply...); err != nil {
			return s.classify(err)
		}
	}
	s.o.Log.Info("verdict shown in Slack", "cluster", p.Key.Cluster, "hash", p.Key.Hash, "verdict", p.Verdict.String(), "channel", id, "ts", ts)
	return nil
}

// classify classes slack-go's errors: a rate limit (429 with
// Retry-After, or Slack's ratelimited) waits as Slack says; Slack's own
// transient errors and 5xx are retried; a message gone is made again; any
// other error (invalid_auth, channel_not_found, not_in_channel) is
// refused for good, with Slack's words.
func (s *Slack) classify(err error) *outbox.Error {
	var limited *slack.RateLimitedError
	var status slack.StatusCodeError
	var refused slack.SlackErrorResponse
	switch {
	case errors.As(err, &limited):
		return &outbox.Error{Status: http.StatusTooManyRequests, Retry: true, Limited: true, After: max(limited.RetryAfter, time.Second), Message: "Slack: rate limited"}
	case errors.As(err, &status):
		return outbox.Classify(status.Code, http.Header{}, "Slack: "+status.Status, s.o.Now())
	case errors.As(err, &refused):
		e := &outbox.Error{Message: "Slack: " + refused.Err}
		if refused.Needed != "" {
			e.Message += fmt.Sprintf(" (needs %s, the token has %s)", refused.Needed, refused.Provided)
		}
		switch refused.Err {
		case "ratelimited":
			e.Retry, e.Limited, e.After = true, true, time.Minute
		case "internal_error", "fatal_error", "service_unavailable", "request_timeout":
			e.Retry = true
		case "message_not_found", "cant_update_message", "edit_window_closed":
			e.Gone = true
		}
		return e
	}
	return outbox.AsError(err)
}
