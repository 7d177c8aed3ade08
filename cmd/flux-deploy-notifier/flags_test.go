package main

import (
	"io"
	"testing"
	"time"
)

// TestDeprecatedBlindAfter: --silence-after and FDN_SILENCE_AFTER, the
// names before --blind-after, still set it; the new variable wins over the
// old, and the command line over both.
func TestDeprecatedBlindAfter(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
	}{
		{"default", nil, nil, 30 * time.Minute},
		{"old flag", []string{"--silence-after", "5m"}, nil, 5 * time.Minute},
		{"new flag", []string{"--blind-after", "6m"}, nil, 6 * time.Minute},
		{"old variable", nil, map[string]string{"FDN_SILENCE_AFTER": "7m"}, 7 * time.Minute},
		{"new variable wins", nil, map[string]string{"FDN_SILENCE_AFTER": "7m", "FDN_BLIND_AFTER": "9m"}, 9 * time.Minute},
		{"the command line wins", []string{"--silence-after", "4m"}, map[string]string{"FDN_BLIND_AFTER": "9m"}, 4 * time.Minute},
	} {
		c, err := parseServe(append([]string{"--cluster", "off", "--insecure-no-auth"}, tt.args...), func(k string) string { return tt.env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := *c.cluster.blindAfter; got != tt.want {
			t.Errorf("%s: --blind-after %v, want %v", tt.name, got, tt.want)
		}
	}
	if _, err := parseServe([]string{"--silence-after", "soon"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("--silence-after soon parsed")
	}
}
