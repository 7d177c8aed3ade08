// Package edge is what every HTTP handler of the service shares: who may
// see data (one check of the bearer token, the status pages' login session
// and an authenticating proxy's header), the one error body and its writer,
// JSON answers, and the paths of the status pages that mails and wait link
// to. The router that puts the handlers together is internal/server's.
package edge

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// Error is the body of every 4xx and 5xx answer. Field names the request
// field at fault, when one is; Matches lists the rollouts an ambiguous
// hash prefix names.
type Error struct {
	Status  int           `json:"-"`
	Message string        `json:"error"`
	Field   string        `json:"field,omitempty"`
	Matches []rollout.Key `json:"matches,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// WriteError answers err: an *Error as it says, anything else as 500
// "internal error", logged with its detail, which the client never sees.
func WriteError(w http.ResponseWriter, log *slog.Logger, err error) {
	e, ok := err.(*Error)
	if !ok {
		if log != nil {
			log.Error("internal error", "err", err)
		}
		e = &Error{Status: http.StatusInternalServerError, Message: "internal error"}
	}
	WriteJSON(w, e.Status, e)
}

// Refuse answers status with msg about field ("" when the request as a
// whole is at fault).
func Refuse(w http.ResponseWriter, status int, field, msg string) {
	WriteJSON(w, status, &Error{Status: status, Field: field, Message: msg})
}

// WriteJSON answers compact JSON: indenting re-scans the whole body, which
// for a rollout of 85 layers cost more than finding it (pipe to jq to read).
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// UIRoot is where the status pages are mounted; the list is there.
const UIRoot = "/ui/"

// RolloutPath is the path of a rollout's status page.
func RolloutPath(k rollout.Key) string {
	return UIRoot + url.PathEscape(k.Cluster) + "/" + url.PathEscape(k.Hash)
}

// LayerPath is the path of a layer's status page; layer is namespace/name.
func LayerPath(layer string) string {
	ns, name, _ := strings.Cut(layer, "/")
	return UIRoot + "layers/" + url.PathEscape(ns) + "/" + url.PathEscape(name)
}
