package wait

import (
	"errors"
	"testing"
	"time"
)

// TestWhyUnknown: what wait says after looking for a deployed descendant
// and finding none, for each way a look ends.
func TestWhyUnknown(t *testing.T) {
	since := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		name string
		d    *descendants
		want string
	}{
		{"no look yet", &descendants{git: &gitSide{}}, ""},
		{"git failed", &descendants{git: &gitSide{err: errors.New("git is not installed")}, looked: true},
			"git could not tell whether a later revision contains it: git is not installed"},
		{"more than a look reads", &descendants{git: &gitSide{}, looked: true, cut: true, since: since},
			"more than 10000 rollouts since 2026-11-30T12:00:00Z, too many to look through for one that contains it"},
		{"some not fetched", &descendants{git: &gitSide{}, looked: true, since: since, checked: 3, unfetched: 1, lastErr: errors.New("bad object")},
			"no deployed revision contains it: 3 rollouts since 2026-11-30T12:00:00Z checked, 1 of them not in this repository (bad object)"},
		{"all checked", &descendants{git: &gitSide{}, looked: true, since: since, checked: 2, listed: 2},
			"no deployed revision contains it: 2 rollouts since 2026-11-30T12:00:00Z checked"},
		{"the oldest checked", &descendants{git: &gitSide{}, looked: true, since: since, checked: MaxCandidates, listed: 2500},
			"no deployed revision contains it: 1000 rollouts since 2026-11-30T12:00:00Z checked, the oldest 1000 of 2500"},
	} {
		if got := tt.d.why(); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
