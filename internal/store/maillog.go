package store

import (
	"bytes"
	"fmt"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The mail log: what became of every mail enqueued for a rollout, so that
// its status page can say who was told. The outbox forgets a mail once it
// is sent, and the de-duplication keys go when the rollout settles; the
// log stays as long as the rollout does (retention). Keyed by the
// rollout's mail key prefix (cluster, hash) and the outbox sequence.
var bucketMailLog = []byte("maillog")

func mailLogKey(k rollout.Key, seq uint64) []byte {
	return append([]byte(rollout.MailKeyPrefix(k)), seqKey(seq)...)
}

// logMail records q's state in the log, if it is a rollout's mail.
func logMail(tx txn, q outbox.Queued, state outbox.MailState, sent *time.Time) error {
	mk, err := rollout.ParseMailKey(q.Mail.Key)
	if err != nil || mk.Kind == rollout.MailBlind {
		return nil // the service's own mail: no rollout page shows it
	}
	st := outbox.MailStatus{Kind: q.Mail.Kind, To: q.Mail.To, Layer: q.Mail.Layer, Object: q.Mail.Object, Reason: q.Mail.Reason,
		Release: q.Mail.Release, Enqueued: q.Enqueued, State: state, Sent: sent, Delivery: q.Delivery}
	if state != outbox.MailRetrying {
		st.NextAttempt = time.Time{}
	}
	return tx.Bucket(bucketMailLog).Put(mailLogKey(mk.Rollout, q.Seq), encodeMailStatus(st))
}

// MailLog returns what became of every mail enqueued for a rollout, in the
// order they were enqueued.
func (d *DB) MailLog(k rollout.Key) ([]outbox.MailStatus, error) {
	var out []outbox.MailStatus
	err := d.kv.view(func(tx txn) error {
		prefix := []byte(rollout.MailKeyPrefix(k))
		c := tx.Bucket(bucketMailLog).Cursor()
		for key, v := c.Seek(prefix); key != nil && bytes.HasPrefix(key, prefix); key, v = c.Next() {
			if len(key) != len(prefix)+8 {
				continue // another rollout whose hash extends this one's
			}
			st, err := decodeMailStatus(v)
			if err != nil {
				return fmt.Errorf("decode mail log %q: %w", key, err)
			}
			out = append(out, st)
		}
		return nil
	})
	return out, err
}

// dropMailLog deletes the log of rollouts that are gone for good.
func dropMailLog(tx txn, gone []rollout.Key) error {
	return deleteByRollout(tx.Bucket(bucketMailLog), gone)
}

// outboxMail reads the queued mail of seq from the outbox, or nil.
func outboxMail(tx txn, seq uint64) (*outbox.Queued, error) {
	k := seqKey(seq)
	v := tx.Bucket(bucketOutbox).Get(k)
	if v == nil {
		return nil, nil
	}
	q, err := decodeQueued(k, v)
	return &q, err
}
