package store

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The forge outbox: one record a rollout (hash NUL cluster), the latest
// verdict decided for it, what is shown with it, and what the forge took
// last (outbox.Publication).
var (
	bucketForge = []byte("forge")
	// The keys of the records with a verdict to deliver: the dispatcher
	// reads what is due, not the retention's worth of delivered ones.
	bucketForgeDue = []byte("forge-due")
	// cluster NUL line (a source, else a repository) -> the commit the
	// forge last showed applied: the base of the next one's commits
	// (forge.Comparer).
	bucketForgeHeads = []byte("forge-heads")
)

// publicationVersion 2 added what is shown with the verdict (Shown).
const publicationVersion = 2

// ErrNoPublication is returned when a forge outbox record is missing: the
// rollout was purged while its delivery was under way.
var ErrNoPublication = errors.New("no such publication")

// publicationKey is the rollout's key, as the archive's (settledKey): its
// hash first, which is hex, so that any cluster name reads back.
func publicationKey(k rollout.Key) []byte { return settledKey(k) }

func encodePublication(p outbox.Publication) []byte {
	w := &recordWriter{}
	w.byte(publicationVersion)
	w.byte(byte(p.Verdict))
	w.uint(p.Seq)
	w.time(p.Changed)
	w.time(p.Since)
	w.uint(p.SentSeq)
	w.byte(byte(p.Sent))
	w.string(p.Ref)
	w.uint(uint64(p.Attempts))
	w.time(p.NextAttempt)
	w.string(p.LastError)
	w.bool(p.Dead)
	for _, s := range []string{p.Revision, p.Commit, p.Source.String(), p.Summary} {
		w.string(s)
	}
	return w.b
}

func decodePublication(k, v []byte) (outbox.Publication, error) {
	var p outbox.Publication
	key, err := parseSettledKey(k)
	if err != nil {
		return p, err
	}
	p.Key = key
	r := &recordReader{b: string(v), own: true}
	ver := r.byte()
	if (ver < 1 || ver > publicationVersion) && r.err == nil {
		return p, fmt.Errorf("forge outbox record %q of version %d, this binary reads 1 to %d", k, ver, publicationVersion)
	}
	p.Verdict = rollout.Verdict(r.byte())
	p.Seq = r.uvarint()
	p.Changed = r.time()
	p.Since = r.time()
	p.SentSeq = r.uvarint()
	p.Sent = rollout.Verdict(r.byte())
	p.Ref = r.string()
	p.Attempts = int(r.uvarint())
	p.NextAttempt = r.time()
	p.LastError = r.string()
	p.Dead = r.bool()
	if ver >= 2 {
		p.Revision, p.Commit, p.Source, p.Summary = r.string(), r.string(), r.ref(), r.string()
	}
	if err := r.done(); err != nil {
		return p, fmt.Errorf("forge outbox record %q: %w", k, err)
	}
	return p, nil
}

// publish records the verdicts of a batch: a new one starts a delivery,
// and replaces the one before when that was not delivered yet; the same
// verdict again changes nothing (a reload publishes every live rollout's)
// unless it is restated (what it says changed).
func publish(tx txn, ps []rollout.Published) error {
	b := tx.Bucket(bucketForge)
	for _, pub := range ps {
		k := publicationKey(pub.Key)
		var p outbox.Publication
		if v := b.Get(k); v != nil {
			var err error
			if p, err = decodePublication(k, v); err != nil {
				return err
			}
			if p.Verdict == pub.Verdict && p.Seq > 0 && !pub.Restate {
				if p.Shown == (rollout.Shown{}) {
					// Written by a binary that kept no Shown: the
					// reload's publication gives it, the same verdict.
					p.Shown = pub.Shown
					if err := putPublication(tx, k, p); err != nil {
						return err
					}
				}
				continue
			}
		}
		if !p.Due() {
			p.Since = pub.At
		}
		p.Key, p.Verdict, p.Changed, p.Shown = pub.Key, pub.Verdict, pub.At, pub.Shown
		p.Seq++
		p.Delivery = outbox.Delivery{}
		if err := putPublication(tx, k, p); err != nil {
			return err
		}
	}
	return nil
}

// fillShown gives the verdicts still to deliver that an older binary wrote
// without what is shown with them (version 1) the final view of their
// rollout when it settled. A live rollout's reload publishes it (publish);
// one in neither stays without, and is not shown.
func fillShown(tx txn, records *codec) error {
	var fill []outbox.Publication
	b := tx.Bucket(bucketForge)
	err := tx.Bucket(bucketForgeDue).ForEach(func(k, _ []byte) error {
		v := b.Get(k)
		if v == nil {
			return nil
		}
		p, err := decodePublication(k, v)
		if err != nil || p.Shown != (rollout.Shown{}) {
			return err
		}
		rec := tx.Bucket(bucketSettled).Get(k) // the same key: settledKey
		if rec == nil {
			return nil
		}
		view, err := records.decodeSettled(rec)
		if err != nil {
			return err
		}
		p.Shown = rollout.ShownOf(view)
		fill = append(fill, p)
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range fill {
		if err := putPublication(tx, publicationKey(p.Key), p); err != nil {
			return err
		}
	}
	return nil
}

// putPublication writes p under k and keeps the index of what is due.
func putPublication(tx txn, k []byte, p outbox.Publication) error {
	if err := tx.Bucket(bucketForge).Put(k, encodePublication(p)); err != nil {
		return err
	}
	if p.Due() {
		return tx.Bucket(bucketForgeDue).Put(k, nil)
	}
	return tx.Bucket(bucketForgeDue).Delete(k)
}

// purgePublications drops the records of verdicts delivered (or refused
// for good) that were decided before cutoff: retention, as for settled
// rollouts. An undelivered one stays until it is.
func purgePublications(tx txn, cutoff time.Time) error {
	b := tx.Bucket(bucketForge)
	var gone [][]byte
	err := b.ForEach(func(k, v []byte) error {
		p, err := decodePublication(k, v)
		if err != nil {
			return err
		}
		if !p.Due() && p.Changed.Before(cutoff) {
			gone = append(gone, slices.Clone(k))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range gone {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Publications returns the forge outbox's records with a verdict to
// deliver, oldest decision first.
func (d *DB) Publications() ([]outbox.Publication, error) {
	var out []outbox.Publication
	err := d.kv.view(func(tx txn) error {
		records := tx.Bucket(bucketForge)
		return tx.Bucket(bucketForgeDue).ForEach(func(k, _ []byte) error {
			v := records.Get(k)
			if v == nil {
				return nil
			}
			p, err := decodePublication(k, v)
			if err != nil {
				return err
			}
			if p.Due() {
				out = append(out, p)
			}
			return nil
		})
	})
	slices.SortStableFunc(out, func(a, b outbox.Publication) int { return a.Changed.Compare(b.Changed) })
	return out, err
}

// Publication returns the forge outbox's record of k (the rollout page
// shows it), false when there is none.
func (d *DB) Publication(k rollout.Key) (outbox.Publication, bool, error) {
	var p outbox.Publication
	found := false
	err := d.kv.view(func(tx txn) error {
		key := publicationKey(k)
		v := tx.Bucket(bucketForge).Get(key)
		if v == nil {
			return nil
		}
		found = true
		var err error
		p, err = decodePublication(key, v)
		return err
	})
	return p, found, err
}

// UpdatePublication applies f to the record of k as one transaction: the
// dispatcher's outcome of a delivery of seq. f sees the record as stored,
// which may hold a later verdict than the one delivered.
func (d *DB) UpdatePublication(k rollout.Key, f func(*outbox.Publication)) error {
	return d.kv.update(func(tx txn) error {
		b := tx.Bucket(bucketForge)
		key := publicationKey(k)
		v := b.Get(key)
		if v == nil {
			return ErrNoPublication
		}
		p, err := decodePublication(key, v)
		if err != nil {
			return err
		}
		f(&p)
		return putPublication(tx, key, p)
	})
}

// Head returns the commit the forge last showed applied on cluster for
// line (a source, else a repository), "" when none.
func (d *DB) Head(cluster, line string) (string, error) {
	var head string
	err := d.kv.view(func(tx txn) error {
		head = string(tx.Bucket(bucketForgeHeads).Get(headKey(cluster, line)))
		return nil
	})
	return head, err
}

// SetHead records the commit the forge last showed applied on cluster for
// line.
func (d *DB) SetHead(cluster, line, commit string) error {
	return d.kv.update(func(tx txn) error {
		return tx.Bucket(bucketForgeHeads).Put(headKey(cluster, line), []byte(commit))
	})
}

// headKey is cluster NUL line: a cluster's name has no NUL.
func headKey(cluster, line string) []byte { return []byte(cluster + "\x00" + line) }
