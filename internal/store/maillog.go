package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The mail log: what became of every mail enqueued for a rollout, so that
// its status page can say who was told. The outbox forgets a mail once it
// is sent, and the de-duplication keys go when the rollout settles; the
// log stays as long as the rollout does (retention). Keyed by the
// rollout's mail key prefix (cluster, hash) and the outbox sequence.
var bucketMailLog = []byte("maillog")

// Mail states in the log.
const (
	MailWaiting  = "waiting"  // in the outbox, not tried yet
	MailRetrying = "retrying" // a transient failure; tried again later
	MailSent     = "sent"
	MailDead     = "dead" // failed for good: dead-lettered
)

// MailRecord is one mail of a rollout as its status page shows it.
type MailRecord struct {
	Kind     rollout.MailKind `json:"kind"`
	To       string           `json:"to"`
	Layer    string           `json:"layer,omitempty"`
	Object   *rollout.Object  `json:"object,omitempty"`
	Reason   string           `json:"reason,omitempty"`
	Enqueued time.Time        `json:"enqueued"`
	State    string           `json:"state"`
	Sent     *time.Time       `json:"sent,omitempty"`
	Attempts int              `json:"attempts"`
	Next     *time.Time       `json:"next_attempt,omitempty"` // while retrying
	Error    string           `json:"error,omitempty"`        // the last failure
}

func mailLogKey(k rollout.Key, seq uint64) []byte {
	return append([]byte(rollout.MailKeyPrefix(k)), seqKey(seq)...)
}

// logMail records q's state in the log, if it is a rollout's mail.
func logMail(tx *bolt.Tx, q rollout.Queued, state string, sent *time.Time) error {
	mk, err := rollout.ParseMailKey(q.Mail.Key)
	if err != nil || mk.Kind == rollout.MailSilence {
		return nil // the service's own mail: no rollout page shows it
	}
	rec := MailRecord{Kind: q.Mail.Kind, To: q.Mail.To, Layer: q.Mail.Layer, Object: q.Mail.Object, Reason: q.Mail.Reason,
		Enqueued: q.Enqueued, State: state, Sent: sent, Attempts: q.Attempts, Error: q.LastError}
	if state == MailRetrying {
		next := q.NextAttempt
		rec.Next = &next
	}
	v, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode mail log: %w", err)
	}
	return tx.Bucket(bucketMailLog).Put(mailLogKey(mk.Rollout, q.Seq), v)
}

// MailLog returns what became of every mail enqueued for a rollout, in the
// order they were enqueued.
func (d *DB) MailLog(k rollout.Key) ([]MailRecord, error) {
	var out []MailRecord
	err := d.db.View(func(tx *bolt.Tx) error {
		prefix := []byte(rollout.MailKeyPrefix(k))
		c := tx.Bucket(bucketMailLog).Cursor()
		for key, v := c.Seek(prefix); key != nil && bytes.HasPrefix(key, prefix); key, v = c.Next() {
			if len(key) != len(prefix)+8 {
				continue // another rollout whose hash extends this one's
			}
			var rec MailRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("decode mail log %q: %w", key, err)
			}
			out = append(out, rec)
		}
		return nil
	})
	return out, err
}

// dropMailLog deletes the log of rollouts that are gone for good.
func dropMailLog(tx *bolt.Tx, gone []rollout.Key) error {
	return deleteByRollout(tx.Bucket(bucketMailLog), gone)
}

// outboxMail reads the queued mail of seq from the outbox, or nil.
func outboxMail(tx *bolt.Tx, seq uint64) (*rollout.Queued, error) {
	k := seqKey(seq)
	v := tx.Bucket(bucketOutbox).Get(k)
	if v == nil {
		return nil, nil
	}
	q, err := decodeQueued(k, v)
	return &q, err
}
