package cluster

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/episode"
)

// apiHealth watches every request the reader's client makes. client-go's
// informers retry a failing list or watch by themselves, and a refused
// connection does not even reach their error handler: without this the
// service would go on as if the cluster had nothing new to say. While
// requests fail, Warning says so; the log says it once when it begins
// and once when a request succeeds again.
type apiHealth struct {
	next    http.RoundTripper
	log     *slog.Logger
	now     func() time.Time
	episode episode.Tracker
}

func (h *apiHealth) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := h.next.RoundTrip(req)
	switch {
	case req.Context().Value(probeKey{}) != nil:
		// The access check's, which tells its own findings.
	case err != nil && req.Context().Err() != nil:
		// Our own cancellation (the reader stopping): nothing to say.
	case err != nil:
		h.failed(req, err.Error())
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		h.failed(req, resp.Status)
	case resp.StatusCode < 300:
		if n, since, ended := h.episode.Ok(); ended {
			h.log.Info("reading the cluster again", "failed_requests", n, "for", h.now().Sub(since).Round(time.Millisecond).String())
		}
	}
	return resp, err
}

func (h *apiHealth) failed(req *http.Request, why string) {
	if h.episode.Fail(h.now(), req.Method+" "+req.URL.Path+": "+why) {
		h.log.Warn("reading the cluster fails; client-go retries", "path", req.URL.Path, "err", why)
	}
}

func (h *apiHealth) warning() string {
	since, n, last := h.episode.UnderWay()
	if since.IsZero() {
		return ""
	}
	return fmt.Sprintf("reading the cluster fails since %s (%d failed requests; layers and sources are not seen to change): %s",
		since.UTC().Format(time.RFC3339), n, last)
}

// NewForConfig returns a reader of the cluster cfg reaches (Run starts
// it), whose every request is watched: Warning then says when the API
// server cannot be read.
func NewForConfig(cfg *rest.Config, sub Submitter, c Config, log *slog.Logger, now func() time.Time) (*Reader, error) {
	cfg = rest.CopyConfig(cfg)
	health := &apiHealth{log: log, now: now}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		health.next = rt
		return health
	})
	// One HTTP client, so one connection, for all its clients.
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	dc, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, fmt.Errorf("cluster client: %w", err)
	}
	var wire [2]*wireClient
	for i, kind := range []wireKind{layerKind(), releaseKind()} {
		if wire[i], err = newWireClient(cfg, hc, wireCodec{kind: kind, failed: misfitLogged(log, kind.kind)}); err != nil {
			return nil, fmt.Errorf("cluster client: %w", err)
		}
	}
	r := newReader(dc, wire[0], wire[1], sub, c, log, now)
	r.health = health
	return r, nil
}

// Warning says, while the reader's access is lost (the periodic check's
// finding), why; else, while requests to the API server fail, since when
// and why; "" otherwise.
func (r *Reader) Warning() string {
	if since, _, why := r.lost.UnderWay(); !since.IsZero() {
		return why
	}
	if r.health == nil {
		return ""
	}
	return r.health.warning()
}
