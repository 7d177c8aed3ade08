package rollout

import (
	"errors"
	"strings"
	"time"
)

// MailKey is a mail's de-duplication key: the outbox enqueues a key once,
// so the mail it names goes out once. A rollout's mails are keyed by the
// rollout, the kind, what the mail is about (a layer and an object or a
// reason) and the recipient; the "no events from Flux" mail, which is about
// the pipe from a cluster, by the cluster, the episode and the recipient.
type MailKey struct {
	Rollout Key // zero for the blind mail
	Kind    MailKind
	About   []string  // layer, then object or reason, where the kind has them
	Episode time.Time // the blind mail's: the last event before the episode
	// Cluster is the blind mail's cluster: "" for the service's own, whose
	// keys are those earlier releases stored.
	Cluster string
	To      string
}

// The encoding is NUL-separated fields. A rollout's key starts with its
// cluster, which is never empty, so the blind mail's namespace, which
// starts with an empty field, cannot meet one. The bytes are those the
// outbox has always stored, so keys enqueued by earlier releases still
// de-duplicate.
const keySep = "\x00"

// blindKeyTag marks the blind mail's keys: the bytes of the kind's name
// before it was renamed (silence), so that an episode mailed before an
// upgrade is not mailed again after it.
const blindKeyTag = "silence"

// String encodes the key as the outbox stores it.
func (k MailKey) String() string {
	if k.Kind == MailBlind {
		parts := []string{"", blindKeyTag, k.Episode.UTC().Format(time.RFC3339), k.To}
		if k.Cluster != "" {
			parts = append(parts, k.Cluster)
		}
		return strings.Join(parts, keySep)
	}
	parts := append([]string{k.Rollout.Cluster, k.Rollout.Hash, string(k.Kind)}, k.About...)
	return strings.Join(append(parts, k.To), keySep)
}

// ParseMailKey decodes a key String made.
func ParseMailKey(s string) (MailKey, error) {
	p := strings.Split(s, keySep)
	switch {
	case (len(p) == 4 || len(p) == 5 && p[4] != "") && p[0] == "" && p[1] == blindKeyTag:
		at, err := time.Parse(time.RFC3339, p[2])
		if err != nil {
			return MailKey{}, errors.New("malformed blind mail key: " + err.Error())
		}
		k := MailKey{Kind: MailBlind, Episode: at, To: p[3]}
		if len(p) == 5 {
			k.Cluster = p[4]
		}
		return k, nil
	case len(p) >= 4 && p[0] != "" && p[1] != "":
		return MailKey{Rollout: Key{p[0], p[1]}, Kind: MailKind(p[2]), About: p[3 : len(p)-1], To: p[len(p)-1]}, nil
	}
	return MailKey{}, errors.New("malformed mail key")
}

// MailKeyPrefix is how every mail key of a rollout starts.
func MailKeyPrefix(k Key) string { return k.Cluster + keySep + k.Hash + keySep }
