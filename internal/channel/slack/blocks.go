package slack

import (
	"strings"

	"github.com/slack-go/slack"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Slack's limits on a block's text.
const (
	maxHeader  = 150
	maxSection = 3000
)

// emoji marks each verdict in the header.
func emoji(v rollout.Verdict) string {
	switch v {
	case rollout.VerdictApplying:
		return "🔄"
	case rollout.VerdictApplied:
		return "✅"
	case rollout.VerdictFailed:
		return "❌"
	case rollout.VerdictStuck:
		return "⏳"
	case rollout.VerdictSuperseded:
		return "⏭️"
	}
	return "•"
}

// Blocks are the message of m. Every text from Flux or the cluster
// (cluster, revision, layer, reason, message) is plain_text, which Slack
// shows as it is: no mrkdwn, no mention, no link. mrkdwn carries only the
// links, whose text and address the service makes.
func Blocks(m channel.Message) []slack.Block {
	blocks := []slack.Block{
		slack.NewHeaderBlock(plain(clip(emoji(m.Verdict)+" "+m.Summary(), maxHeader))),
	}
	var lines []string
	if d := m.Detail(); d != "" {
		lines = append(lines, d)
	}
	if m.Progress != "" {
		lines = append(lines, m.Progress)
	}
	lines = append(lines, "Revision "+m.Revision)
	blocks = append(blocks, slack.NewSectionBlock(plain(clip(strings.Join(lines, "\n"), maxSection)), nil, nil))
	if m.Failure != nil && m.Failure.Message != "" {
		blocks = append(blocks, slack.NewSectionBlock(plain(clip(m.Failure.Message, maxSection)), nil, nil))
	}
	if l := links(m); l != nil {
		blocks = append(blocks, slack.NewContextBlock("", l))
	}
	return blocks
}

// ReplyBlocks are the reply in the message's thread when it failed: what
// failed and Flux's words, so that the channel is notified.
func ReplyBlocks(m channel.Message) []slack.Block {
	text := "Failed on " + m.Cluster
	if d := m.Detail(); d != "" {
		text += ": " + d
	}
	if m.Failure != nil && m.Failure.Message != "" {
		text += "\n" + m.Failure.Message
	}
	return []slack.Block{slack.NewSectionBlock(plain(clip(text, maxSection)), nil, nil)}
}

// links are the commit's link and the status page's, nil when neither
// is known.
func links(m channel.Message) *slack.TextBlockObject {
	var ls []string
	if m.CommitURL != "" {
		ls = append(ls, link(m.CommitURL, "commit "+m.Commit))
	}
	if m.PageURL != "" {
		ls = append(ls, link(m.PageURL, "status page"))
	}
	if ls == nil {
		return nil
	}
	return slack.NewTextBlockObject(slack.MarkdownType, strings.Join(ls, " · "), false, true)
}

// link is mrkdwn's <url|text>: the characters that would end it are
// escaped in both, as Slack asks.
func link(url, text string) string {
	url = strings.NewReplacer("&", "&amp;", "<", "%3C", ">", "%3E", "|", "%7C", " ", "%20").Replace(url)
	text = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "|", "¦").Replace(text)
	return "<" + url + "|" + text + ">"
}

func plain(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

// clip cuts s to n characters (runes), as Slack counts them.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
