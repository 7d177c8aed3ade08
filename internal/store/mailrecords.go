package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// A queued record is a mail in the outbox or among the dead letters, with
// its delivery state; a mail-log record is what became of one. Both are
// the store's own binary records, like evidence: the first byte is the
// record's version. A record that starts with '{' is the JSON schema 5 and
// before wrote, still read (queuedJSON, mailStatusJSON). Queued version 2
// added the mail's release.
const (
	queuedVersion     = 2
	mailStatusVersion = 2 // 2: the release
)

func encodeQueued(q outbox.Queued) []byte {
	w := &recordWriter{}
	w.byte(queuedVersion)
	m := q.Mail
	for _, s := range []string{m.Key, string(m.Kind), m.To, m.Layer, m.Reason, q.LastError} {
		w.string(s)
	}
	w.object(m.Object)
	w.bool(m.View != nil)
	if m.View != nil {
		// The view's own layout is the settled records': its version
		// goes with it, so that a later layout still reads this one.
		w.byte(settledVersion)
		w.view(m.View)
	}
	w.bool(m.Blind != nil)
	if s := m.Blind; s != nil {
		w.time(s.Since)
		w.uint(uint64(s.Layers))
		w.string(s.Warning)
	}
	w.time(q.Enqueued)
	w.uint(uint64(q.Attempts))
	w.time(q.NextAttempt)
	w.string(m.Release.String())
	return w.b
}

// decodeQueued reads an outbox or dead-letter record under its sequence.
func decodeQueued(k, v []byte) (outbox.Queued, error) {
	var q outbox.Queued
	if len(v) > 0 && v[0] == '{' {
		var j queuedJSON
		if err := json.Unmarshal(v, &j); err != nil {
			return q, fmt.Errorf("decode mail %x: %w", k, err)
		}
		q = j.queued()
	} else {
		r := &recordReader{b: string(v), own: true}
		qver := r.byte()
		if (qver < 1 || qver > queuedVersion) && r.err == nil {
			return q, fmt.Errorf("mail %x of record version %d, this binary reads 1 to %d", k, qver, queuedVersion)
		}
		m := &q.Mail
		var kind string
		for _, s := range []*string{&m.Key, &kind, &m.To, &m.Layer, &m.Reason, &q.LastError} {
			*s = r.string()
		}
		m.Kind = rollout.MailKind(kind)
		m.Object = r.object()
		if r.bool() {
			ver := r.byte()
			if (ver < 1 || ver > settledVersion) && r.err == nil {
				return q, fmt.Errorf("mail %x shows a view of record version %d, this binary reads 1 to %d", k, ver, settledVersion)
			}
			m.View = r.view(ver)
		}
		if r.bool() {
			m.Blind = &rollout.Blind{Since: r.time(), Layers: int(r.uvarint()), Warning: r.string()}
		}
		q.Enqueued, q.Attempts, q.NextAttempt = r.time(), int(r.uvarint()), r.time()
		if qver >= 2 {
			m.Release = r.ref()
		}
		if err := r.done(); err != nil {
			return q, fmt.Errorf("decode mail %x: %w", k, err)
		}
	}
	q.Seq = binary.BigEndian.Uint64(k)
	return q, nil
}

func encodeMailStatus(st outbox.MailStatus) []byte {
	w := &recordWriter{}
	w.byte(mailStatusVersion)
	for _, s := range []string{string(st.Kind), st.To, st.Layer, st.Reason, string(st.State), st.LastError} {
		w.string(s)
	}
	w.object(st.Object)
	w.time(st.Enqueued)
	w.optTime(st.Sent)
	w.uint(uint64(st.Attempts))
	var next *time.Time
	if !st.NextAttempt.IsZero() {
		next = &st.NextAttempt
	}
	w.optTime(next)
	w.string(st.Release.String())
	return w.b
}

func decodeMailStatus(v []byte) (outbox.MailStatus, error) {
	var st outbox.MailStatus
	if len(v) > 0 && v[0] == '{' {
		var j mailStatusJSON
		err := json.Unmarshal(v, &j)
		return j.status(), err
	}
	r := &recordReader{b: string(v), own: true}
	ver := r.byte()
	if (ver < 1 || ver > mailStatusVersion) && r.err == nil {
		return st, fmt.Errorf("mail log of record version %d, this binary reads 1 to %d", ver, mailStatusVersion)
	}
	var kind, state string
	for _, s := range []*string{&kind, &st.To, &st.Layer, &st.Reason, &state, &st.LastError} {
		*s = r.string()
	}
	st.Kind, st.State = rollout.MailKind(kind), outbox.MailState(state)
	st.Object = r.object()
	st.Enqueued, st.Sent, st.Attempts = r.time(), r.optTime(), int(r.uvarint())
	if next := r.optTime(); next != nil {
		st.NextAttempt = *next
	}
	if ver >= 2 {
		st.Release = r.ref()
	}
	st.Dead = st.State == outbox.MailDead
	return st, r.done()
}

func (w *recordWriter) uint(n uint64) { w.b = binary.AppendUvarint(w.b, n) }

// object writes an optional object.
func (w *recordWriter) object(o *rollout.Object) {
	w.bool(o != nil)
	if o != nil {
		w.objects([]rollout.Object{*o}, false)
	}
}

func (r *recordReader) object() *rollout.Object {
	if !r.bool() {
		return nil
	}
	if objs := r.objects(); len(objs) == 1 {
		return &objs[0]
	}
	r.fail("object")
	return nil
}

// queuedJSON is the outbox and dead-letter record of schema 5 and before:
// the mail as JSON, its object and its rollout's view as /verdict shows
// them (that JSON is the API's, which stays).
type queuedJSON struct {
	Mail struct {
		Key    string           `json:"key"`
		Kind   rollout.MailKind `json:"kind"`
		To     string           `json:"to"`
		Layer  string           `json:"layer"`
		Reason string           `json:"reason"`
		Object *rollout.Object  `json:"object"`
		View   *rollout.View    `json:"view"`
		Blind  *struct {
			Since   time.Time `json:"since"`
			Layers  int       `json:"layers"`
			Warning string    `json:"warning"`
		} `json:"silence"` // the blind mail's, before its kind was renamed
	} `json:"mail"`
	Enqueued    time.Time `json:"enqueued"`
	Attempts    int       `json:"attempts"`
	NextAttempt time.Time `json:"next_attempt"`
	LastError   string    `json:"last_error"`
}

func (j *queuedJSON) queued() outbox.Queued {
	m := j.Mail
	q := outbox.Queued{
		Mail:     rollout.Mail{Key: m.Key, Kind: m.Kind, To: m.To, Layer: m.Layer, Reason: m.Reason, Object: m.Object, View: m.View},
		Enqueued: j.Enqueued, Delivery: outbox.Delivery{Attempts: j.Attempts, NextAttempt: j.NextAttempt, LastError: j.LastError},
	}
	if s := m.Blind; s != nil {
		q.Mail.Blind = &rollout.Blind{Since: s.Since, Layers: s.Layers, Warning: s.Warning}
	}
	if q.Mail.Kind == "silence" {
		q.Mail.Kind = rollout.MailBlind
	}
	return q
}

// mailStatusJSON is the mail-log record of schema 5 and before.
type mailStatusJSON struct {
	Kind     rollout.MailKind `json:"kind"`
	To       string           `json:"to"`
	Layer    string           `json:"layer"`
	Object   *rollout.Object  `json:"object"`
	Reason   string           `json:"reason"`
	Enqueued time.Time        `json:"enqueued"`
	State    outbox.MailState `json:"state"`
	Sent     *time.Time       `json:"sent"`
	Attempts int              `json:"attempts"`
	Next     *time.Time       `json:"next_attempt"`
	Error    string           `json:"error"`
}

func (j *mailStatusJSON) status() outbox.MailStatus {
	st := outbox.MailStatus{Kind: j.Kind, To: j.To, Layer: j.Layer, Object: j.Object, Reason: j.Reason,
		Enqueued: j.Enqueued, State: j.State, Sent: j.Sent,
		Delivery: outbox.Delivery{Attempts: j.Attempts, LastError: j.Error, Dead: j.State == outbox.MailDead}}
	if j.Next != nil {
		st.NextAttempt = *j.Next
	}
	return st
}
