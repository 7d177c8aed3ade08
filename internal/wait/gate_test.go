package wait

import (
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestSoakOf: the gate's soak over a table of histories: met only once
// the soak is over with nothing failed within it; a failure after it
// applied, or a newer rollout failed or stuck within the soak, fails it;
// one after the soak, or a newer rollout applying or applied, does not.
func TestSoakOf(t *testing.T) {
	t0 := time.Date(2026, 12, 8, 10, 0, 0, 0, time.UTC)
	at := func(min int) *time.Time { v := t0.Add(time.Duration(min) * time.Minute); return &v }
	mk := func(c string, began int, verdict rollout.Verdict, ended int) *rollout.View {
		v := &rollout.View{Cluster: "stg", Hash: strings.Repeat(c, 40), FirstSeen: *at(began), Verdict: verdict, Summary: verdict.String(),
			Deadline: *at(began + 30)}
		switch verdict {
		case rollout.VerdictApplied:
			v.CompletedAt = at(ended)
		case rollout.VerdictFailed:
			// A failed rollout need not complete: its failure's time counts.
			v.Failures = []rollout.FailureView{{Layer: "flux-system/apps", Reason: "HealthCheckFailed", At: *at(ended), LastAt: *at(ended + 1)}}
		}
		return v
	}
	deployed := mk("a", 0, rollout.VerdictApplied, 5) // applied at 10:05
	degraded := *deployed
	degraded.Failures = []rollout.FailureView{{Layer: "flux-system/apps", Reason: "HealthCheckFailed", At: *at(20), LastAt: *at(21), AfterApplied: true}}
	lateDegraded := *deployed
	lateDegraded.Failures = []rollout.FailureView{{Layer: "flux-system/apps", Reason: "HealthCheckFailed", At: *at(50), LastAt: *at(50), AfterApplied: true}}
	for _, tt := range []struct {
		name     string
		deployed *rollout.View
		since    []*rollout.View
		now      int
		want     Soak
		failure  string
	}{
		{"under way", deployed, nil, 20, SoakRunning, ""},
		{"a minute before its end, counted from the applied time", deployed, nil, 34, SoakRunning, ""},
		{"met exactly at its end", deployed, nil, 35, SoakMet, ""},
		{"a pipeline started late: met at once", deployed, nil, 600, SoakMet, ""},
		{"a failure after it applied, within", &degraded, nil, 25, SoakFailed, "flux-system/apps failed after it applied: HealthCheckFailed"},
		{"a failure after it applied, after the soak", &lateDegraded, nil, 60, SoakMet, ""},
		{"a newer rollout failed within", deployed, []*rollout.View{mk("b", 10, rollout.VerdictFailed, 12), deployed}, 12, SoakFailed, "a newer rollout, bbbbbbb, failed at 2026-12-08T10:12:00Z"},
		{"a newer rollout failed within, seen late", deployed, []*rollout.View{mk("b", 10, rollout.VerdictFailed, 12)}, 600, SoakFailed, "bbbbbbb, failed"},
		{"a newer rollout stuck within", deployed, []*rollout.View{mk("b", 1, rollout.VerdictStuck, 0)}, 40, SoakFailed, "bbbbbbb, stuck at 2026-12-08T10:31:00Z"},
		{"a newer rollout failed after the soak", deployed, []*rollout.View{mk("b", 34, rollout.VerdictFailed, 36)}, 40, SoakMet, ""},
		{"newer rollouts applied and applying", deployed, []*rollout.View{mk("c", 20, rollout.VerdictApplying, 0), mk("b", 10, rollout.VerdictApplied, 12)}, 36, SoakMet, ""},
		{"an older rollout that failed does not count", deployed, []*rollout.View{mk("z", -10, rollout.VerdictFailed, 1)}, 36, SoakMet, ""},
		{"the earliest failure is told", &degraded, []*rollout.View{mk("b", 10, rollout.VerdictFailed, 12)}, 36, SoakFailed, "bbbbbbb, failed at 2026-12-08T10:12:00Z"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ends, failure := SoakOf(tt.deployed, tt.since, 30*time.Minute, *at(tt.now))
			if got != tt.want || !ends.Equal(*at(35)) || !strings.Contains(failure, tt.failure) || (tt.failure == "") != (failure == "") {
				t.Errorf("%d, ends %s, failure %q; want %d, ends 10:35, failure %q", got, ends.Format(time.TimeOnly), failure, tt.want, tt.failure)
			}
		})
	}
}
