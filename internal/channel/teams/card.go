package teams

import (
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The body a Workflows webhook takes: a message with one Adaptive Card
// attachment (https://learn.microsoft.com/microsoftteams/platform/
// task-modules-and-cards/cards/cards-reference#adaptive-card).
type (
	// Post is the request's body.
	Post struct {
		Type        string       `json:"type"` // "message"
		Attachments []Attachment `json:"attachments"`
	}
	// Attachment carries the card.
	Attachment struct {
		ContentType string  `json:"contentType"` // application/vnd.microsoft.card.adaptive
		ContentURL  *string `json:"contentUrl"`  // null
		Content     Card    `json:"content"`
	}
	// Card is an Adaptive Card.
	Card struct {
		Schema  string    `json:"$schema"`
		Type    string    `json:"type"` // "AdaptiveCard"
		Version string    `json:"version"`
		Body    []Element `json:"body"`
		Actions []Action  `json:"actions,omitempty"`
		MSTeams struct {
			Width string `json:"width"`
		} `json:"msteams"`
	}
	// Element is a RichTextBlock: its TextRuns are shown as they are,
	// never read as Markdown (a TextBlock's text is).
	Element struct {
		Type    string    `json:"type"` // "RichTextBlock"
		Inlines []TextRun `json:"inlines"`
	}
	// TextRun is a run of text.
	TextRun struct {
		Type     string `json:"type"` // "TextRun"
		Text     string `json:"text"`
		Weight   string `json:"weight,omitempty"`
		Size     string `json:"size,omitempty"`
		Color    string `json:"color,omitempty"`
		FontType string `json:"fontType,omitempty"`
	}
	// Action opens a link.
	Action struct {
		Type  string `json:"type"` // "Action.OpenUrl"
		Title string `json:"title"`
		URL   string `json:"url"`
	}
)

// Message is the card that shows m.
func Message(m channel.Message) Post {
	color := map[rollout.Verdict]string{rollout.VerdictApplied: "Good", rollout.VerdictFailed: "Attention", rollout.VerdictStuck: "Warning"}[m.Verdict]
	card := Card{Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard", Version: "1.4"}
	card.MSTeams.Width = "Full"
	card.Body = append(card.Body, block(TextRun{Text: m.Summary(), Weight: "Bolder", Size: "Large", Color: color}))
	if d := m.Detail(); d != "" {
		weight := ""
		if m.Failure != nil {
			weight = "Bolder"
		}
		card.Body = append(card.Body, block(TextRun{Text: d, Weight: weight}))
	}
	if m.Failure != nil && m.Failure.Message != "" {
		card.Body = append(card.Body, block(TextRun{Text: m.Failure.Message, FontType: "Monospace"}))
	}
	if m.Progress != "" {
		card.Body = append(card.Body, block(TextRun{Text: m.Progress, Color: "Accent"}))
	}
	card.Body = append(card.Body, block(TextRun{Text: "Revision " + m.Revision, Size: "Small"}))
	if m.CommitURL != "" {
		card.Actions = append(card.Actions, Action{Type: "Action.OpenUrl", Title: "Commit " + m.Commit, URL: m.CommitURL})
	}
	if m.PageURL != "" {
		card.Actions = append(card.Actions, Action{Type: "Action.OpenUrl", Title: "Status page", URL: m.PageURL})
	}
	return Post{Type: "message", Attachments: []Attachment{{ContentType: "application/vnd.microsoft.card.adaptive", Content: card}}}
}

func block(r TextRun) Element {
	r.Type = "TextRun"
	return Element{Type: "RichTextBlock", Inlines: []TextRun{r}}
}
