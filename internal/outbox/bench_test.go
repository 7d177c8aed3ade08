package outbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// BenchmarkFlush: a Flush of 500 verdicts due, half of them paced.
func BenchmarkFlush(b *testing.B) {
	box := &boxOf{recs: map[rollout.Key]*outbox.Publication{}}
	to := deliverFunc(func(context.Context, outbox.Publication, func(string)) error { return nil })
	d := outbox.NewDispatcher(box, to, outbox.DispatchConfig{AlertAfter: time.Hour, Pace: time.Hour, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	for b.Loop() {
		for i := range 500 {
			k := rollout.Key{Cluster: "prod", Hash: fmt.Sprintf("%03d", i)}
			p := &outbox.Publication{Key: k, Verdict: rollout.VerdictApplied, Seq: 2}
			if i%2 == 0 {
				p.SentSeq, p.Sent, p.SentAt = 1, rollout.VerdictApplied, now
			}
			box.recs[k] = p
		}
		d.Flush(context.Background())
	}
}
