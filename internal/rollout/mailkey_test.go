package rollout

import (
	"testing"
	"time"
)

// TestMailKeys pins the encoding the outbox stores (earlier releases
// stored these very bytes, so their keys must still de-duplicate) and
// checks that every key decodes to what made it.
func TestMailKeys(t *testing.T) {
	r := Key{Cluster: "prod", Hash: "abc123"}
	episode := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		key  MailKey
		want string
	}{
		{MailKey{Rollout: r, Kind: MailApplying, To: "a@x"}, "prod\x00abc123\x00applying\x00a@x"},
		{MailKey{Rollout: r, Kind: MailFailed, About: []string{"flux-system/apps", "HealthCheckFailed"}, To: "a@x"},
			"prod\x00abc123\x00failed\x00flux-system/apps\x00HealthCheckFailed\x00a@x"},
		{MailKey{Rollout: r, Kind: MailPruneFailed, About: []string{"flux-system/apps", "ConfigMap/apps/old"}, To: "b@y"},
			"prod\x00abc123\x00prune-failed\x00flux-system/apps\x00ConfigMap/apps/old\x00b@y"},
		{MailKey{Kind: MailBlind, Episode: episode, To: "a@x"}, "\x00silence\x002026-11-30T12:00:00Z\x00a@x"},
		// A registered cluster's episode: its own key, though its silence
		// began when the service's own did.
		{MailKey{Kind: MailBlind, Episode: episode, Cluster: "staging", To: "a@x"}, "\x00silence\x002026-11-30T12:00:00Z\x00a@x\x00staging"},
	} {
		got := c.key.String()
		if got != c.want {
			t.Errorf("%+v encodes as %q, want %q", c.key, got, c.want)
		}
		back, err := ParseMailKey(got)
		if err != nil || back.String() != got || back.Rollout != c.key.Rollout || back.Kind != c.key.Kind || back.To != c.key.To || back.Cluster != c.key.Cluster || !back.Episode.Equal(c.key.Episode) {
			t.Errorf("%q decodes as %+v, %v", got, back, err)
		}
	}
	for _, bad := range []string{"", "prod", "\x00silence\x00yesterday\x00a@x", "prod\x00abc", "\x00silence\x002026-11-30T12:00:00Z\x00a@x\x00"} {
		if _, err := ParseMailKey(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
