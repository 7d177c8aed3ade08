package rollout

import (
	"testing"
	"time"
)

// TestStory: each way the story is told, from what the reports said.
func TestStory(t *testing.T) {
	at := func(sec int) time.Time { return mt0.Add(time.Duration(sec) * time.Second) }
	un := Step{Kind: StepUninstalled, Version: 1, Reason: "UninstallSucceeded", At: at(1)}
	stall := &Mark{At: at(30), Signal: SignalFailed, Reason: "RetriesExceeded", Message: "Failed to install after 4 attempt(s)\nmore"}
	for _, tt := range []struct {
		name      string
		r         *Remedy
		recovered time.Time
		want      string
	}{
		{"nothing known", nil, time.Time{}, ""},
		{"failed, nothing done yet", &Remedy{Attempts: 1}, time.Time{}, ""},
		{"one uninstall after each of four attempts", &Remedy{Steps: []Step{un}, Attempts: 4, Remedied: 4, Stalled: stall}, time.Time{},
			"uninstalled the failed release v1: it is gone from the cluster; retried 3 more times, each time: failed again, uninstalled again; stalled (Failed to install after 4 attempt(s)): a new commit is needed"},
		{"released after the stall", &Remedy{Steps: []Step{un}, Attempts: 1, Remedied: 1, Stalled: stall}, at(40),
			"uninstalled the failed release v1: it is gone from the cluster"},
		{"a failed rollback without a version", &Remedy{Steps: []Step{{Kind: StepRollbackFailed, Reason: "RollbackFailed", Error: "timed out", At: at(1)}}}, time.Time{},
			"rollback to the previous release failed: timed out"},
		{"the last failure not remedied", &Remedy{Steps: []Step{{Kind: StepRolledBack, Version: 1, Reason: "RollbackSucceeded", At: at(1)}}, Attempts: 2, Remedied: 1}, time.Time{},
			"rolled back to v1: the cluster runs the previous release; retried: failed again"},
	} {
		if got := tt.r.Story(tt.recovered); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.name, got, tt.want)
		}
	}
}
