package main

import (
	"html/template"
	"net/http"
	"regexp"
	"time"

	"github.com/go-chi/chi/v5"
	slackapi "github.com/slack-go/slack"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/slack"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// slackPage renders the Slack message of a rollout (its blocks, and the
// reply in its thread when it failed) in the status pages' style: what
// the README shows of it. Slack's own rendering is Slack's.
func slackPage(rs interface {
	Get(rollout.Key) *rollout.View
}, now time.Time) http.HandlerFunc {
	links := channel.Links{
		Commit: func(_ string, _ rollout.Ref, c string) string { return "https://github.com/acme/fleet/commit/" + c },
		Page:   func(k rollout.Key) string { return "https://fdn.example.com/ui/" + k.Cluster + "/" + k.Hash },
	}
	page := template.Must(template.New("slack").Parse(slackHTML))
	return func(w http.ResponseWriter, r *http.Request) {
		v := rs.Get(rollout.Key{Cluster: chi.URLParam(r, "cluster"), Hash: chi.URLParam(r, "hash")})
		if v == nil {
			http.NotFound(w, r)
			return
		}
		m := channel.Of(outbox.Publication{Key: v.Key(), Verdict: v.Verdict, Changed: now, Shown: rollout.ShownOf(v)}, links)
		data := struct {
			At            string
			Blocks, Reply []block
		}{At: now.Format("15:04"), Blocks: blocks(slack.Blocks(m))}
		if v.Verdict == rollout.VerdictFailed {
			data.Reply = blocks(slack.ReplyBlocks(m))
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = page.Execute(w, data)
	}
}

// block is one Slack block as the page shows it.
type block struct {
	Kind string // header, section, context
	Text template.HTML
}

func blocks(bs []slackapi.Block) []block {
	mrkdwnLink := regexp.MustCompile(`<([^|>]+)\|([^>]+)>`) // the one mrkdwn the service sends
	var out []block
	text := func(o *slackapi.TextBlockObject) template.HTML {
		if o.Type != slackapi.MarkdownType {
			return template.HTML(template.HTMLEscapeString(o.Text)) //nolint:gosec // escaped
		}
		var h string
		last := 0
		for _, m := range mrkdwnLink.FindAllStringSubmatchIndex(o.Text, -1) {
			h += template.HTMLEscapeString(o.Text[last:m[0]]) + `<a href="` + template.HTMLEscapeString(o.Text[m[2]:m[3]]) + `">` +
				template.HTMLEscapeString(o.Text[m[4]:m[5]]) + "</a>"
			last = m[1]
		}
		return template.HTML(h + template.HTMLEscapeString(o.Text[last:])) //nolint:gosec // escaped
	}
	for _, b := range bs {
		switch b := b.(type) {
		case *slackapi.HeaderBlock:
			out = append(out, block{"header", text(b.Text)})
		case *slackapi.SectionBlock:
			out = append(out, block{"section", text(b.Text)})
		case *slackapi.ContextBlock:
			for _, e := range b.ContextElements.Elements {
				if o, ok := e.(*slackapi.TextBlockObject); ok {
					out = append(out, block{"context", text(o)})
				}
			}
		}
	}
	return out
}

// slackHTML is the page.
const slackHTML = `<!doctype html>
<html><head><meta charset="utf-8"><link rel="stylesheet" href="/ui/static/style.css">
<style>
.msg { display: flex; overflow-wrap: anywhere; gap: .7rem; padding: .8rem 1rem; background: var(--card); border: 1px solid var(--line); border-radius: 8px; max-width: 640px; margin: 1rem; }
.avatar { width: 36px; height: 36px; border-radius: 6px; background: var(--applying); color: #fff; font-weight: 700; display: flex; align-items: center; justify-content: center; flex: none; }
.who { font-weight: 700; } .who small { font-weight: 400; color: var(--muted); margin-left: .4rem; }
.header { font-size: 1.1rem; font-weight: 700; margin: .3rem 0; }
.section { white-space: pre-wrap; margin: .3rem 0; }
.context { color: var(--muted); font-size: .85rem; margin-top: .4rem; }
.thread { margin: .6rem 0 0; padding-left: .8rem; border-left: 3px solid var(--line); }
</style></head><body>
<div class="msg"><div class="avatar">FD</div><div style="min-width:0">
<div class="who">flux-deploy-notifier<small>APP {{.At}}</small></div>
{{range .Blocks}}<div class="{{.Kind}}">{{.Text}}</div>{{end}}
{{with .Reply}}<div class="thread"><div class="who">flux-deploy-notifier<small>reply in thread</small></div>{{range .}}<div class="{{.Kind}}">{{.Text}}</div>{{end}}</div>{{end}}
</div></div></body></html>`
