package forge_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/forge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var now = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name           string
		status         int
		header         http.Header
		retry, limited bool
		after          time.Duration
	}{
		{"429 with Retry-After", 429, http.Header{"Retry-After": {"30"}}, true, true, 30 * time.Second},
		{"429 without", 429, nil, true, true, time.Minute},
		{"secondary limit", 403, http.Header{"Retry-After": {"61"}}, true, true, 61 * time.Second},
		{"primary limit exhausted", 403, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {strconv.FormatInt(now.Add(90*time.Second).Unix(), 10)}}, true, true, 90 * time.Second},
		{"Retry-After as a date", 429, http.Header{"Retry-After": {now.Add(2 * time.Minute).Format(http.TimeFormat)}}, true, true, 2 * time.Minute},
		{"forbidden", 403, http.Header{"X-Ratelimit-Remaining": {"4999"}}, false, false, 0},
		{"502", 502, nil, true, false, 0},
		{"503 with Retry-After", 503, http.Header{"Retry-After": {"5"}}, true, false, 5 * time.Second},
		{"401", 401, nil, false, false, 0},
		{"404", 404, nil, false, false, 0},
		{"422", 422, nil, false, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.header
			if h == nil {
				h = http.Header{}
			}
			e := forge.Classify(c.status, h, "msg", now)
			if e.Retry != c.retry || e.Limited != c.limited || e.After != c.after {
				t.Fatalf("%+v: want retry %v, limited %v, after %v", e, c.retry, c.limited, c.after)
			}
		})
	}
	if e := forge.AsError(errors.New("connection refused")); !e.Retry || e.Status != 0 {
		t.Fatalf("a network error: %+v, want transient", e)
	}
}

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
