package forge_test

import (
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"  a\tb\r\nc  ":         "a b c",
		"x\x1b[1my\x00z\u0085w": "x [1my z w",
		"naïve ✓":               "naïve ✓",
		"abcdefghij":            "abcdefghij",
		"abcdefghijk":           "abcdefghi…",
		"abcdefgh é":            "abcdefgh é",
		"abcdefgh ét":           "abcdefgh…",
	} {
		if got := forge.Clean(in, 10); got != want {
			t.Errorf("Clean(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseRepo(t *testing.T) {
	for in, ok := range map[string]bool{"acme/fleet": true, "group/sub/project": true, "acme": false, "/fleet": false, "acme/": false, "acme/fl eet": false} {
		if _, err := forge.ParseRepo(in); (err == nil) != ok {
			t.Errorf("ParseRepo(%q): %v, want ok %v", in, err, ok)
		}
	}
}

func TestStateOf(t *testing.T) {
	want := map[rollout.Verdict]forge.State{
		rollout.VerdictApplying: forge.StateInProgress, rollout.VerdictApplied: forge.StateSuccess,
		rollout.VerdictFailed: forge.StateFailure, rollout.VerdictStuck: forge.StateFailure, rollout.VerdictSuperseded: forge.StateInactive,
	}
	for _, v := range rollout.Verdicts() {
		if s, ok := forge.StateOf(v); !ok || s != want[v] {
			t.Errorf("StateOf(%s) = %q %v, want %q", v, s, ok, want[v])
		}
	}
	if _, ok := forge.StateOf(rollout.VerdictUnknown); ok {
		t.Error("unknown has a forge state")
	}
}
