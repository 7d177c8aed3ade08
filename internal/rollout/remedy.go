package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// What helm-controller did after a release's action failed on a revision
// (docs/verdicts.md, "What helm-controller did next"): each remediation it
// reported, the retries between them and whether it stopped (Stalled).
// Flux's whole-second times cannot order these: a failure, its rollback
// and the status that says the retries are exhausted often share one
// second. The story is ordered by what Flux says of the sequence instead:
// the Helm release version each remediation names (every retry makes a
// new one), the failure counter the status keeps, and Stalled, which ends
// the story of the spec; so it is the same whatever order the reports
// arrive in, and a status read in the same second as an event never hides
// the stall.

// StepKind is what one remediation did.
type StepKind uint8

const (
	StepRolledBack      StepKind = iota + 1 // the rollback succeeded: the cluster runs the earlier release again
	StepRollbackFailed                      // the rollback failed
	StepUninstalled                         // the failed release was uninstalled
	StepUninstallFailed                     // its uninstall failed
)

// Step is one remediation helm-controller reported.
type Step struct {
	Kind StepKind `json:"kind"`
	// Version is the Helm release version it names: a rollback's target,
	// an uninstall's release; 0 when its report named none.
	Version int       `json:"version,omitempty"`
	Reason  string    `json:"reason"`          // Flux's
	Error   string    `json:"error,omitempty"` // a failed remediation's first error line
	At      time.Time `json:"at"`              // its earliest report
}

// compareSteps is Flux's order of remediations: by the release version
// they name, rising with each retry; the rest only makes it total.
func compareSteps(a, b Step) int {
	if a.Version != b.Version {
		return a.Version - b.Version
	}
	if a.Kind != b.Kind {
		return int(a.Kind) - int(b.Kind)
	}
	if c := strings.Compare(a.Reason, b.Reason); c != 0 {
		return c
	}
	return strings.Compare(a.Error, b.Error)
}

// maxSteps bounds the remediations kept of one release on one revision:
// with unlimited retries (retries: -1) helm-controller remediates without
// end; the latest are kept, and that there were more.
const maxSteps = 6

// Remedy is what helm-controller did after a release's failed action on
// one revision. Merging is commutative, associative and idempotent, as
// evidence's is.
type Remedy struct {
	Steps   []Step `json:"steps,omitempty"`   // in Flux's order, the latest maxSteps
	Earlier bool   `json:"earlier,omitempty"` // steps before Steps were left out
	// Attempts is how many attempts of the action failed, as the status
	// counts them for the remediation (installFailures, upgradeFailures);
	// Remedied how many of them a remediation followed (the status's
	// Remediated condition is there after the attempt it counts): an
	// identical remediation after each retry (an uninstall of v1) is one
	// Step. 0: no status told it.
	Attempts int `json:"attempts,omitempty"`
	Remedied int `json:"remedied,omitempty"`
	// Stalled is helm-controller's word that it stopped: retries
	// exhausted, nothing to roll back to. It ends the story of the spec.
	Stalled *Mark `json:"stalled,omitempty"`
}

func (r *Remedy) clone() *Remedy {
	if r == nil {
		return nil
	}
	c := *r
	c.Steps = slices.Clone(r.Steps)
	if r.Stalled != nil {
		m := *r.Stalled
		c.Stalled = &m
	}
	return &c
}

// merge folds o into r and reports whether anything was learned.
func (r *Remedy) merge(o *Remedy) bool {
	changed := false
	for _, s := range o.Steps {
		i, found := slices.BinarySearchFunc(r.Steps, s, compareSteps)
		switch {
		case found:
			if s.At.Before(r.Steps[i].At) {
				r.Steps[i].At, changed = s.At, true
			}
		case len(r.Steps) == maxSteps && i == 0: // older than every step kept
			if !r.Earlier {
				r.Earlier, changed = true, true
			}
		default:
			r.Steps, changed = slices.Insert(r.Steps, i, s), true
			if len(r.Steps) > maxSteps {
				r.Steps, r.Earlier = slices.Delete(r.Steps, 0, 1), true
			}
		}
	}
	if o.Earlier && !r.Earlier {
		r.Earlier, changed = true, true
	}
	if o.Attempts > r.Attempts {
		r.Attempts, changed = o.Attempts, true
	}
	if o.Remedied > r.Remedied {
		r.Remedied, changed = o.Remedied, true
	}
	if s := o.Stalled; s != nil && (r.Stalled == nil || s.after(*r.Stalled)) {
		m := *s
		r.Stalled, changed = &m, true
	}
	return changed
}

// stepOf reports whether reason is one of r's remediations': a failure
// of that reason is the remediation's own, not the one it remedies.
func (r *Remedy) stepOf(reason string) bool {
	return r != nil && slices.ContainsFunc(r.Steps, func(s Step) bool { return s.Reason == reason })
}

// Story tells what helm-controller did, in order: each remediation, the
// retry that failed before the next, the failed attempts not remedied
// (yet), and the stall, unless the release was released since (recovered
// at or after it). "" when nothing is known.
func (r *Remedy) Story(recoveredAt time.Time) string {
	if r == nil {
		return ""
	}
	var parts []string
	if r.Earlier {
		parts = append(parts, "…")
	}
	for i, s := range r.Steps {
		if i > 0 || r.Earlier {
			parts = append(parts, "retried: failed again")
		}
		parts = append(parts, s.text())
	}
	// Remediations the status counted beyond those reported apart: the
	// same one again after each retry (an uninstall names v1 each time).
	// With earlier steps left out, which ones they were is not known.
	remedied := max(len(r.Steps), r.Remedied)
	if extra := remedied - len(r.Steps); extra > 0 && len(r.Steps) > 0 && !r.Earlier {
		again := r.Steps[len(r.Steps)-1].again()
		if extra == 1 {
			parts = append(parts, "retried: failed again", again)
		} else {
			parts = append(parts, fmt.Sprintf("retried %d more times, each time: failed again, %s", extra, again))
		}
	}
	// A failed attempt no remediation followed (yet).
	if len(r.Steps) > 0 && r.Attempts > remedied {
		parts = append(parts, "retried: failed again")
	}
	if r.stalled(recoveredAt) {
		parts = append(parts, r.stall())
	}
	return strings.Join(parts, "; ")
}

// stalled reports whether helm-controller stopped trying, and the release
// was not released since (at recoveredAt, or zero).
func (r *Remedy) stalled(recoveredAt time.Time) bool {
	return r != nil && r.Stalled != nil && (recoveredAt.IsZero() || recoveredAt.Before(r.Stalled.At))
}

// stall says helm-controller stopped, in its words.
func (r *Remedy) stall() string {
	msg := strings.TrimSpace(firstLine(r.Stalled.Message))
	if msg == "" {
		msg = r.Stalled.Reason
	}
	return "stalled (" + msg + "): a new commit is needed"
}

func (s Step) text() string {
	v := ""
	if s.Version > 0 {
		v = fmt.Sprintf(" v%d", s.Version)
	}
	switch s.Kind {
	case StepRolledBack:
		return "rolled back to" + orPrevious(v) + ": the cluster runs the previous release"
	case StepRollbackFailed:
		return "rollback to" + orPrevious(v) + " failed: " + s.Error
	case StepUninstalled:
		return "uninstalled the failed release" + v + ": it is gone from the cluster"
	case StepUninstallFailed:
		return "uninstall of the failed release" + v + " failed: " + s.Error
	}
	return "remediated"
}

// again is a step said again after a retry.
func (s Step) again() string {
	switch s.Kind {
	case StepRolledBack:
		return "rolled back again"
	case StepRollbackFailed:
		return "rollback failed again"
	case StepUninstalled:
		return "uninstalled again"
	case StepUninstallFailed:
		return "uninstall failed again"
	}
	return "remediated again"
}

// orPrevious is " vN", or what a rollback targets when its report named
// no version.
func orPrevious(v string) string {
	if v == "" {
		return " the previous release"
	}
	return v
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// remedy is what helm-controller did after a release's failed action on
// the revision ev is about, or nil.
func (ev *Evidence) remedy() *Remedy {
	if ev == nil || ev.Inside == nil {
		return nil
	}
	return ev.Inside.Remedy
}

// recoveredAt is when a release's evidence last said it was released
// after failing, or zero.
func (ev *Evidence) recoveredAt() time.Time {
	if ev == nil || ev.Succeeded == nil || len(ev.Failures) == 0 {
		return time.Time{}
	}
	return ev.LastSucceeded
}
