// Package webhook receives the events notification-controller posts to a
// generic or generic-hmac Provider: it bounds and authenticates the request,
// decodes the event, and answers 202 only once the engine has stored it.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/ingest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/signature"
)

// MaxBody is the largest event accepted. Flux caps a message at 39,000
// characters, so a real event is far below it.
const MaxBody = 1 << 20

// Submitter stores an observation durably, or says why it could not.
type Submitter interface {
	Submit(ctx context.Context, o rollout.Observation) error
}

// Handler is the POST /webhook endpoint.
type Handler struct {
	key     []byte     // HMAC key: the token file's bytes exactly
	bearer  *edge.Auth // the same token as an Authorization header can carry it
	sub     Submitter
	log     *slog.Logger
	events  *prometheus.CounterVec
	latency prometheus.Histogram
	bufs    sync.Pool
	sigs    *signature.Verifier
	onEvent func(cluster string)
}

// OnEvent sets a function called for every event accepted, with the
// cluster its metadata names ("" none): the silence watchdog's proof that
// the pipe from that cluster's notification-controller works.
func (h *Handler) OnEvent(f func(cluster string)) { h.onEvent = f }

func (h *Handler) accepted(w http.ResponseWriter, cluster, kind, reason, result string) {
	h.count(kind, reason, result)
	if h.onEvent != nil {
		h.onEvent(cluster)
	}
	w.WriteHeader(http.StatusAccepted)
}

// New returns the handler. A nil token disables authentication
// (--insecure-no-auth); the caller has warned about it.
func New(token []byte, sub Submitter, log *slog.Logger, reg prometheus.Registerer) *Handler {
	h := &Handler{
		sub: sub,
		log: log,
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fdn_events_received_total",
			Help: "Flux events received, by involved object kind, reason and result.",
		}, []string{"kind", "reason", "result"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fdn_webhook_duration_seconds",
			Help:    "Time to answer a webhook request, the durable commit included.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, 1},
		}),
		bufs: sync.Pool{New: func() any { return new(bytes.Buffer) }},
	}
	if token != nil {
		h.key = token
		h.sigs = signature.NewVerifier(token)
		// A header cannot carry a line break, so a token file ending in a
		// newline (the usual Secret) is matched without it.
		h.bearer = edge.NewAuth(bytes.TrimRight(token, "\r\n"), "", nil)
	}
	// Rejections from 0, so that the first one after a start is an
	// increase an alert sees (a rotated token that no longer matches
	// loses every event: Flux does not retry a 401).
	h.events.WithLabelValues("", "", resultRejected)
	if reg != nil {
		reg.MustRegister(h.events, h.latency)
	}
	return h
}

// Results counted per event.
const (
	resultStored   = "stored"
	resultIgnored  = "ignored"
	resultRejected = "rejected"
	resultFailed   = "failed"
)

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() { h.latency.Observe(time.Since(start).Seconds()) }()
	if !isJSON(r.Header.Get("Content-Type")) {
		h.reject(w, http.StatusUnsupportedMediaType, "", "Content-Type must be application/json")
		return
	}
	if r.ContentLength > MaxBody {
		h.reject(w, http.StatusRequestEntityTooLarge, "", "body larger than 1 MiB")
		return
	}
	buf := h.bufs.Get().(*bytes.Buffer)
	defer func() {
		// Keep buffers of ordinary events only; a rare huge one is dropped.
		if buf.Cap() <= 64<<10 {
			h.bufs.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBody)); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			h.reject(w, http.StatusRequestEntityTooLarge, "", "body larger than 1 MiB")
			return
		}
		h.reject(w, http.StatusBadRequest, "body", "reading body: "+err.Error())
		return
	}
	body := buf.Bytes()
	if !h.authorized(r, body) {
		h.reject(w, http.StatusUnauthorized, "", "missing or invalid X-Signature or Authorization")
		return
	}
	d, err := flux.Decode(body)
	if err != nil {
		field, reason := "body", err.Error()
		if fe, ok := errors.AsType[*flux.FieldError](err); ok {
			field, reason = fe.Field, fe.Reason
		}
		h.reject(w, http.StatusBadRequest, field, reason)
		return
	}
	kind, reason := d.InvolvedObject.Kind, d.Reason
	o, ok := ingest.Event(d)
	if !ok {
		h.accepted(w, d.Cluster, kind, reason, resultIgnored)
		return
	}
	if err := h.sub.Submit(r.Context(), o); err != nil {
		if errors.Is(err, rollout.ErrInvalid) {
			// Decode checks what Flux sends; this is the model's own check
			// of the same, which a retry cannot pass.
			h.reject(w, http.StatusBadRequest, "body", err.Error())
			return
		}
		h.count(kind, reason, resultFailed)
		if errors.Is(err, context.Canceled) {
			return // the sender is gone; it will retry
		}
		// Not logged per event: a full disk fails thousands a second, and
		// the engine logs a failing store once an episode.
		h.log.Debug("store event", "err", err, "cluster", o.Cluster, "revision", o.Revision, "layer", o.Emitter.Layer())
		// 503 makes notification-controller retry; nothing was acknowledged.
		edge.Refuse(w, http.StatusServiceUnavailable, "", "event not stored, retry")
		return
	}
	h.accepted(w, d.Cluster, kind, reason, resultStored)
}

// isJSON reports whether a Content-Type is JSON's. Flux sends exactly
// "application/json"; only other spellings pay for the parser's map.
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}

// authorized accepts a generic-hmac X-Signature over the raw body, or the
// generic provider's Authorization: Bearer header, both keyed by the same
// token and compared in constant time.
func (h *Handler) authorized(r *http.Request, body []byte) bool {
	if h.key == nil {
		return true
	}
	if sig := r.Header.Get(signature.Header); sig != "" && h.sigs.Valid(sig, body) {
		return true
	}
	return h.bearer.Bearer(r)
}

func (h *Handler) reject(w http.ResponseWriter, status int, field, msg string) {
	h.count("", "", resultRejected)
	edge.Refuse(w, status, field, msg)
}

func (h *Handler) count(kind, reason, result string) {
	// Label values come from senders: bound them to Flux's vocabulary.
	if kind != "" && !flux.KnownKind(kind) {
		kind = "other"
	}
	if !ingest.KnownReason(reason) {
		reason = "other"
	}
	h.events.WithLabelValues(kind, reason, result).Inc()
}
