package store

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The channels' outboxes (outbox.Channel): for each, one record a rollout
// (hash NUL cluster), the latest verdict decided for it, what is shown
// with it, and what the channel took last (outbox.Publication); and the
// keys of the records with a verdict to deliver, so that the dispatcher
// reads what is due, not the retention's worth of delivered ones.
//
// Both buckets are named after the channel: its records the name, the
// keys due the name and "-due". The forge's were "forge" and "forge-due"
// before there were other channels, and every channel since is named the
// same way: the store declares none, and a new channel needs no change
// here (nor a migration).
type channelBuckets struct{ records, due []byte }

func bucketsOf(name string) channelBuckets {
	return channelBuckets{[]byte(name), []byte(name + "-due")}
}

var (
	// cluster NUL line (a source, else a repository) -> the commit the
	// forge last showed applied: the base of the next one's commits
	// (forge.Comparer).
	bucketForgeHeads = []byte("forge-heads")
	// keyChannels, in the meta bucket, lists the channels whose outboxes
	// the store keeps, comma-separated: every channel ever configured, so
	// that retention purges the records of one configured no more and
	// Copy copies them.
	keyChannels = []byte("channels")
)

// forgeChannel is the channel the commits publish to until SetChannels
// names others, as before there were other channels; its outbox is
// always kept.
const forgeChannel = "forge"

// channelsBefore are the channels whose outboxes a store written before
// it listed them (keyChannels) may hold: the buckets those releases made.
var channelsBefore = []string{forgeChannel, "slack", "teams", "webhook"}

// validChannel checks that a channel's name makes two buckets of its own:
// lower-case letters and digits, and neither bucket one the store keeps
// for itself.
func validChannel(name string) error {
	ok := name != "" && len(name) <= 32 && name[0] >= 'a' && name[0] <= 'z'
	for _, r := range name {
		ok = ok && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}
	bk := bucketsOf(name)
	for _, b := range append(buckets, bucketForgeHeads) {
		ok = ok && string(b) != string(bk.records) && string(b) != string(bk.due)
	}
	if !ok {
		return fmt.Errorf("channel %q: a channel's name is lower-case letters and digits, and not one of the store's buckets", name)
	}
	return nil
}

// channelsIn reads the channels whose outboxes tx's store keeps, the
// forge's always among them, and makes their buckets where a backend
// needs them made.
func channelsIn(tx txn) ([]string, error) {
	names := []string{forgeChannel}
	if v := tx.Bucket(bucketMeta).Get(keyChannels); len(v) > 0 {
		names = append(names, strings.Split(string(v), ",")...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, n := range names {
		bk := bucketsOf(n)
		if err := tx.ensure(bk.records); err != nil {
			return nil, err
		}
		if err := tx.ensure(bk.due); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// keepChannels adds names to the channels the store keeps, makes their
// buckets, and returns them all.
func keepChannels(tx txn, names []string) ([]string, error) {
	kept, err := channelsIn(tx)
	if err != nil {
		return nil, err
	}
	all := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(kept), names...))))
	if slices.Equal(all, kept) {
		return kept, nil
	}
	if err := tx.Bucket(bucketMeta).Put(keyChannels, []byte(strings.Join(all, ","))); err != nil {
		return nil, err
	}
	return channelsIn(tx)
}

// publicationVersion 2 added what is shown with the verdict (Shown), 3
// what a chat shows of it (layers done, the failure, the stuck layer, the
// newer commit) and when the channel last took one (SentAt).
const publicationVersion = 3

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
	w.uint(uint64(p.Done))
	w.uint(uint64(p.Expected))
	w.time(p.Completed)
	w.bool(p.Late)
	f := p.Failure
	for _, s := range []string{f.Layer, f.Release.String(), f.Object, f.Reason, f.Message} {
		w.string(s)
	}
	w.bool(f.Stalled)
	w.string(p.RootCause)
	w.string(p.SupersededBy)
	w.time(p.SentAt)
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
		return p, fmt.Errorf("outbox record %q of version %d, this binary reads 1 to %d", k, ver, publicationVersion)
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
	if ver >= 3 {
		p.Done, p.Expected = int(r.uvarint()), int(r.uvarint())
		p.Completed, p.Late = r.time(), r.bool()
		f := &p.Failure
		f.Layer, f.Release, f.Object, f.Reason, f.Message, f.Stalled = r.string(), r.ref(), r.string(), r.string(), r.string(), r.bool()
		p.RootCause, p.SupersededBy = r.string(), r.string()
		p.SentAt = r.time()
	}
	if err := r.done(); err != nil {
		return p, fmt.Errorf("outbox record %q: %w", k, err)
	}
	return p, nil
}

// publish records the verdicts of a batch in each channel's outbox that
// takes them (merge).
func publish(tx txn, channels []outbox.Channel, ps []rollout.Published) error {
	for _, ch := range channels {
		bk := bucketsOf(ch.Name)
		for _, pub := range ps {
			if !ch.Takes(pub) {
				continue
			}
			k := publicationKey(pub.Key)
			p, _, err := getPublication(tx, bk, k)
			if err != nil {
				return err
			}
			if merge(&p, pub) {
				if err := putPublication(tx, bk, k, p); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// merge records pub in p, a channel's record of its rollout (zero when
// none), and reports whether p changed: a new verdict starts a delivery,
// and replaces the one before when that was not delivered yet; the same
// verdict again changes nothing (a reload publishes every live rollout's)
// unless it is restated (what it says changed) or progressed to something
// not shown yet; progress never changes a verdict.
func merge(p *outbox.Publication, pub rollout.Published) bool {
	same := p.Seq > 0 && p.Verdict == pub.Verdict
	switch {
	case pub.Progress && p.Seq > 0 && !same:
		// Progress says more of the verdict it was decided with: a later
		// verdict recorded since (a checkpoint's, before a delivery's
		// record wrote what it had read) stays.
		return false
	case same && pub.Progress && p.Shown == pub.Shown:
		return false
	case same && !pub.Restate && !pub.Progress:
		if p.Shown != (rollout.Shown{}) {
			return false
		}
		// Written by a binary that kept no Shown: the reload's
		// publication gives it, the same verdict.
		p.Shown = pub.Shown
		return true
	}
	if !p.Due() {
		p.Since = pub.At
	}
	p.Key, p.Verdict, p.Changed, p.Shown = pub.Key, pub.Verdict, pub.At, pub.Shown
	p.Seq++
	p.Delivery = outbox.Delivery{}
	return true
}

// fillShown gives the verdicts still to deliver that an older binary wrote
// without what is shown with them (version 1) the final view of their
// rollout when it settled. A live rollout's reload publishes it (publish);
// one in neither stays without, and is not shown.
func fillShown(tx txn, records *codec) error {
	var fill []outbox.Publication
	bk := bucketsOf(forgeChannel)
	b := tx.Bucket(bk.records)
	err := tx.Bucket(bk.due).ForEach(func(k, _ []byte) error {
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
		if err := putPublication(tx, bk, publicationKey(p.Key), p); err != nil {
			return err
		}
	}
	return nil
}

// getPublication reads the record under k in the channel's outbox, and
// whether there is one (none: its key alone).
func getPublication(tx txn, bk channelBuckets, k []byte) (outbox.Publication, bool, error) {
	if v := tx.Bucket(bk.records).Get(k); v != nil {
		p, err := decodePublication(k, v)
		return p, err == nil, err
	}
	var p outbox.Publication
	var err error
	p.Key, err = parseSettledKey(k)
	return p, false, err
}

// putPublication writes p under k and keeps the index of what is due.
func putPublication(tx txn, bk channelBuckets, k []byte, p outbox.Publication) error {
	if err := tx.Bucket(bk.records).Put(k, encodePublication(p)); err != nil {
		return err
	}
	if p.Due() {
		return tx.Bucket(bk.due).Put(k, nil)
	}
	return tx.Bucket(bk.due).Delete(k)
}

// purgePublications drops the records of verdicts delivered (or refused
// for good) that were decided before cutoff, in the outboxes of channels
// (those kept, one configured no more too): retention, as for settled
// rollouts. An undelivered one stays until it is.
func purgePublications(tx txn, channels []string, cutoff time.Time) error {
	for _, name := range channels {
		bk := bucketsOf(name)
		b := tx.Bucket(bk.records)
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
	}
	return nil
}

// SetChannels names the channels whose outboxes the commits publish to
// (forge alone until it is called), and keeps their outboxes from then on.
// Called before the first commit.
func (d *DB) SetChannels(chs ...outbox.Channel) error {
	names := make([]string, len(chs))
	for i, ch := range chs {
		if err := validChannel(ch.Name); err != nil {
			return err
		}
		names[i] = ch.Name
	}
	if err := d.keep(names); err != nil {
		return fmt.Errorf("keep the channels' outboxes: %w", err)
	}
	d.channels = append([]outbox.Channel{}, chs...) // none: no channel, not the forge
	return nil
}

// keep adds names to the channels whose outboxes the store keeps.
func (d *DB) keep(names []string) error {
	if !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(d.kept, n) }) {
		return nil
	}
	var kept []string
	err := d.kv.update(func(tx txn) error {
		var err error
		kept, err = keepChannels(tx, names)
		return err
	})
	if err == nil {
		d.kept = kept // once committed
	}
	return err
}

// ChannelBox is one channel's outbox (outbox.Verdicts). Its reads show
// the progress kept in memory (DB.progress) as if it were in the outbox.
type ChannelBox struct {
	d    *DB
	name string
	bk   channelBuckets
}

// Channel returns the outbox of the channel name, one SetChannels named
// (or the forge's); it panics on another name, a programming error.
func (d *DB) Channel(name string) ChannelBox {
	if !slices.Contains(d.kept, name) {
		panic("store: no outbox for channel " + name)
	}
	return ChannelBox{d, name, bucketsOf(name)}
}

// pending is the progress kept in memory that the channel takes.
func (c ChannelBox) pending() map[string]rollout.Published {
	c.d.pmu.Lock()
	defer c.d.pmu.Unlock()
	if len(c.d.progress) == 0 {
		return nil
	}
	var spec outbox.Channel
	for _, ch := range c.d.publishTo() {
		if ch.Name == c.name {
			spec = ch
		}
	}
	out := map[string]rollout.Published{}
	for k, p := range c.d.progress {
		if spec.Name != "" && spec.Takes(p) {
			out[string(publicationKey(k))] = p
		}
	}
	return out
}

// Publications returns the records with a verdict to deliver, oldest
// decision first.
func (c ChannelBox) Publications() ([]outbox.Publication, error) {
	pend := c.pending()
	var out []outbox.Publication
	err := c.d.kv.view(func(tx txn) error {
		records := tx.Bucket(c.bk.records)
		err := tx.Bucket(c.bk.due).ForEach(func(k, _ []byte) error {
			if _, ok := pend[string(k)]; ok {
				return nil // below
			}
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
		if err != nil {
			return err
		}
		for k, pub := range pend {
			p, _, err := c.read(tx, []byte(k), pub, true)
			if err != nil {
				return err
			}
			if p.Due() {
				out = append(out, p)
			}
		}
		return nil
	})
	slices.SortStableFunc(out, func(a, b outbox.Publication) int { return a.Changed.Compare(b.Changed) })
	return out, err
}

// read returns the record under k in tx with pub merged in (when
// withPub), and whether there is one.
func (c ChannelBox) read(tx txn, k []byte, pub rollout.Published, withPub bool) (outbox.Publication, bool, error) {
	p, found, err := getPublication(tx, c.bk, k)
	if err != nil {
		return p, false, err
	}
	if withPub && merge(&p, pub) {
		found = true
	}
	return p, found, nil
}

// Publication returns the record of k (the rollout page shows it), false
// when there is none.
func (c ChannelBox) Publication(k rollout.Key) (outbox.Publication, bool, error) {
	key := publicationKey(k)
	pub, withPub := c.pending()[string(key)]
	var p outbox.Publication
	found := false
	err := c.d.kv.view(func(tx txn) error {
		var err error
		p, found, err = c.read(tx, key, pub, withPub)
		return err
	})
	return p, found, err
}

// UpdatePublication applies f to the record of k as one transaction
// (UpdatePublications of one).
func (c ChannelBox) UpdatePublication(k rollout.Key, f func(*outbox.Publication)) error {
	return c.UpdatePublications([]outbox.Update{{Key: k, Apply: f}})
}

// UpdatePublications applies each update to its record, in order, as one
// transaction: the dispatcher's outcomes of a burst of deliveries. Each
// sees the record as stored, which may hold a later verdict than the one
// delivered; progress of its rollout kept in memory is written
// first. An update whose record is gone (purged while its delivery was
// under way) is skipped, and ErrNoPublication returned once the others
// are written.
func (c ChannelBox) UpdatePublications(ups []outbox.Update) error {
	if len(ups) == 0 {
		return nil
	}
	var withPub []rollout.Published
	c.d.pmu.Lock()
	seen := make(map[rollout.Key]bool, len(ups))
	for _, u := range ups {
		// A rollout's saved record and its outcome are two updates.
		if pub, ok := c.d.progress[u.Key]; ok && !seen[u.Key] {
			seen[u.Key] = true
			withPub = append(withPub, pub)
		}
	}
	c.d.pmu.Unlock()
	missing := false
	err := c.d.kv.update(func(tx txn) error {
		missing = false
		if err := publish(tx, c.d.publishTo(), withPub); err != nil {
			return err
		}
		for _, u := range ups {
			key := publicationKey(u.Key)
			p, found, err := getPublication(tx, c.bk, key)
			if err != nil {
				return err
			}
			if !found {
				missing = true
				continue
			}
			u.Apply(&p)
			if err := putPublication(tx, c.bk, key, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(withPub) > 0 {
		c.d.pmu.Lock()
		for _, pub := range withPub {
			if cur, ok := c.d.progress[pub.Key]; ok && cur == pub { // not a later one since
				delete(c.d.progress, pub.Key)
			}
		}
		c.d.pmu.Unlock()
	}
	if missing {
		return ErrNoPublication
	}
	return nil
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
