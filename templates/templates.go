// Package templates embeds the mail templates and the status pages (ui/): mail.txt.tmpl (the subject
// and the text part, text/template) and mail.html.tmpl (the HTML part,
// html/template). --templates points at a directory with the same two files
// to override them.
package templates

import "embed"

// FS holds the default templates.
//
//go:embed mail.txt.tmpl mail.html.tmpl
var FS embed.FS

// UI holds the status pages' templates and static files, under ui/.
//
//go:embed ui
var UI embed.FS
