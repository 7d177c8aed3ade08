package rollout

import (
	"testing"
	"time"
)

// TestDecide has a case per rule of the precedence (docs/verdicts.md,
// "Precedence and time").
func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }
	deadline := at(30)
	for _, c := range []struct {
		name string
		f    facts
		now  time.Time
		want Verdict
		late bool
	}{
		{"nothing reported yet", facts{deadline: deadline}, at(1), VerdictApplying, false},
		{"no layer by the deadline", facts{deadline: deadline}, at(30), VerdictStuck, false},
		{"every layer applied", facts{completed: true, completedAt: at(5), deadline: deadline}, at(6), VerdictApplied, false},
		{"applied after the deadline: a late applied", facts{completed: true, completedAt: at(40), deadline: deadline}, at(41), VerdictApplied, true},
		{"a failure before completion wins", facts{completed: true, completedAt: at(5), firstFailure: at(3), deadline: deadline}, at(6), VerdictFailed, false},
		{"a failure in the completing second sorts first", facts{completed: true, completedAt: at(5), firstFailure: at(5), deadline: deadline}, at(6), VerdictFailed, false},
		{"a failure after completion is a later degradation", facts{completed: true, completedAt: at(5), firstFailure: at(6), deadline: deadline}, at(7), VerdictApplied, false},
		{"failed before the deadline, not complete", facts{firstFailure: at(10), deadline: deadline}, at(11), VerdictFailed, false},
		{"failed wins over superseded", facts{firstFailure: at(10), superseded: true, supersededAt: at(8), deadline: deadline}, at(11), VerdictFailed, false},
		{"a failure after the deadline cannot undo stuck", facts{firstFailure: at(31), deadline: deadline}, at(32), VerdictStuck, false},
		{"superseded before the deadline", facts{superseded: true, supersededAt: at(10), deadline: deadline}, at(11), VerdictSuperseded, false},
		{"superseded after the deadline stays stuck", facts{superseded: true, supersededAt: at(31), deadline: deadline}, at(32), VerdictStuck, false},
		{"superseded at the deadline", facts{superseded: true, supersededAt: deadline, deadline: deadline}, at(31), VerdictSuperseded, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, late := decide(c.f, c.now)
			if got != c.want || late != c.late {
				t.Fatalf("decide = %s (late %v), want %s (late %v)", got, late, c.want, c.late)
			}
		})
	}
}

// TestSuperseder: a newer revision supersedes only a rollout that had not
// completed before it, and not while a layer still applies this one.
func TestSuperseder(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		p    progress
		want string
	}{
		{"none", progress{}, ""},
		{"newer before completion", progress{supHash: "b", supAt: t0}, "b"},
		{"replaced after it completed", progress{completed: true, completedAt: t0, supHash: "b", supAt: t0.Add(time.Second)}, ""},
		{"replaced in the completing second", progress{completed: true, completedAt: t0, supHash: "b", supAt: t0}, ""},
		{"a layer still applying it", progress{supHash: "b", supAt: t0, working: true}, ""},
	} {
		if got := c.p.superseder(); got != c.want {
			t.Errorf("%s: superseder %q, want %q", c.name, got, c.want)
		}
	}
}
