package store

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// FuzzDecodeEvidence: whatever bytes an evidence record holds (a disk's
// corruption, a bug's), decoding returns evidence or an error, never a
// panic or an allocation the record's size does not bound; and evidence it
// returns encodes to a record that reads back the same.
func FuzzDecodeEvidence(f *testing.F) {
	ev := sampleEvidence()
	f.Add(encodeEvidence(rollout.RoleLayer, ev))
	js, _ := json.Marshal(ev)
	f.Add(js)
	f.Add([]byte{evidenceVersion})
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, role, err := decodeEvidence(b)
		if err != nil {
			return
		}
		rec := encodeEvidence(role, ev)
		back, backRole, err := decodeEvidence(rec)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if backRole != role {
			t.Fatalf("role %d read back as %d", role, backRole)
		}
		if again := encodeEvidence(backRole, back); !bytes.Equal(again, rec) {
			t.Fatalf("record changed on a second round trip:\n%q\n%q", rec, again)
		}
	})
}
