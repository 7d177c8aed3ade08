package store

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/flux"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The store's own records: what goes into bbolt is defined here, not by the
// engine's in-memory types, so that the schema version follows these.

// A settled record is a rollout that can no longer change: its final view,
// everything /verdict, /rollouts and the status pages need, nothing the
// engine would fold again. It is read on every /verdict for an old
// revision, so it is a binary encoding (a tenth of the time JSON takes to
// decode 85 layers), deflated: the layers of a rollout repeat the same
// names, reasons and messages. The first byte is the record's version: 2
// added each layer's first evidence, when its health checks passed and
// what it depends on (Since, Healthy, DependsOn); version 1 records decode
// without them. 3 added each failure's class; records before have none
// (FailureOther: the status page marks a failed health check as a failure).
// 4 added the releases each layer holds, and on each failure the release
// whose it is and what remediation did; records before have none. 5 added
// whether helm-controller stalled after a release's failure. 6 added the
// git commit the rollout deployed; records before have it from their
// revision, by flux's rule.
const settledVersion = 6

func encodeSettled(v *rollout.View) ([]byte, error) { return (&codec{}).encodeSettled(v) }

func (p *codec) encodeSettled(v *rollout.View) ([]byte, error) {
	w := &recordWriter{}
	w.byte(settledVersion)
	w.view(v)
	var buf bytes.Buffer
	fw, _ := p.writers.Get().(*flate.Writer)
	if fw == nil {
		fw, _ = flate.NewWriter(&buf, flate.BestSpeed) // only fails for a bad level
	} else {
		fw.Reset(&buf)
	}
	defer p.writers.Put(fw)
	if _, err := fw.Write(w.b); err != nil {
		return nil, err
	}
	if err := fw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// codec reuses what deflating and inflating a settled record needs: a
// flate writer holds about a megabyte of tables and window, which settling
// allocated for every rollout, a reader a 32 KiB window, which every
// /verdict of a settled rollout allocated, and the buffers they inflate
// into grow by doubling.
type codec struct{ writers, readers, bufs sync.Pool }

func (p *codec) inflate(b []byte) (string, error) {
	fr, _ := p.readers.Get().(io.ReadCloser)
	if fr == nil {
		fr = flate.NewReader(bytes.NewReader(b))
	} else if err := fr.(flate.Resetter).Reset(bytes.NewReader(b), nil); err != nil {
		return "", err
	}
	defer p.readers.Put(fr)
	buf, _ := p.bufs.Get().(*bytes.Buffer)
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	defer p.bufs.Put(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(fr); err != nil {
		return "", fmt.Errorf("inflate settled rollout: %w", err)
	}
	return buf.String(), nil
}

func decodeSettled(b []byte) (*rollout.View, error) { return (&codec{}).decodeSettled(b) }

func (p *codec) decodeSettled(b []byte) (*rollout.View, error) {
	raw, err := p.inflate(b)
	if err != nil {
		return nil, err
	}
	// Every string field is a substring of raw: one allocation.
	r := &recordReader{b: raw}
	ver := r.byte()
	if ver < 1 || ver > settledVersion {
		return nil, fmt.Errorf("settled rollout of record version %d, this binary reads 1 to %d", ver, settledVersion)
	}
	v := r.view(ver)
	if err := r.done(); err != nil {
		return nil, fmt.Errorf("decode settled rollout: %w", err)
	}
	return v, nil
}

// recordWriter appends a record's fields: strings and counts as uvarints
// (a count of 0 stands for a nil slice, n+1 for n elements), times as Unix
// nanoseconds after a presence byte.
type recordWriter struct{ b []byte }

func (w *recordWriter) byte(c byte) { w.b = append(w.b, c) }
func (w *recordWriter) bool(x bool) {
	if x {
		w.byte(1)
	} else {
		w.byte(0)
	}
}
func (w *recordWriter) string(s string) {
	w.b = binary.AppendUvarint(w.b, uint64(len(s)))
	w.b = append(w.b, s...)
}
func (w *recordWriter) count(n int, isNil bool) {
	if isNil {
		w.b = binary.AppendUvarint(w.b, 0)
		return
	}
	w.b = binary.AppendUvarint(w.b, uint64(n)+1)
}
func (w *recordWriter) strings(ss []string) {
	w.count(len(ss), ss == nil)
	for _, s := range ss {
		w.string(s)
	}
}
func (w *recordWriter) time(t time.Time) {
	w.bool(!t.IsZero())
	if !t.IsZero() {
		w.b = binary.BigEndian.AppendUint64(w.b, uint64(t.UnixNano()))
	}
}
func (w *recordWriter) optTime(t *time.Time) {
	w.bool(t != nil)
	if t != nil {
		w.time(*t)
	}
}

// view writes every field of a view: settled records, and the rollout a
// queued mail shows.
func (w *recordWriter) view(v *rollout.View) {
	for _, s := range []string{v.Cluster, v.Revision, v.Hash, v.Origin, v.OriginHash, v.Verdict.String(), v.Summary,
		v.Subject, v.Source.String(), v.ExpectedFrom, v.RootCause} {
		w.string(s)
	}
	w.bool(v.Terminal)
	w.bool(v.Late)
	w.string(v.Commit)
	w.time(v.FirstSeen)
	w.time(v.LastSeen)
	w.time(v.Deadline)
	w.optTime(v.CompletedAt)
	w.bool(v.SupersededBy != nil)
	if v.SupersededBy != nil {
		w.string(*v.SupersededBy)
	}
	w.bool(v.SupersedeKey != nil)
	if v.SupersedeKey != nil {
		w.string(v.SupersedeKey.Cluster)
		w.string(v.SupersedeKey.Hash)
	}
	w.strings(v.Behind)
	// Empty and absent layers are one value now; the flag stays, for the
	// records written before.
	w.count(v.Layers.Len(), false)
	for _, l := range v.Layers.All() {
		for _, s := range []string{l.Name, string(l.State), l.Revision, l.Reason, l.Message} {
			w.string(s)
		}
		w.optTime(l.At)
		w.optTime(l.Since)
		w.optTime(l.Healthy)
		w.strings(l.DependsOn)
		w.count(len(l.Releases), l.Releases == nil)
		for _, rv := range l.Releases {
			for _, s := range []string{rv.Kind, rv.Namespace, rv.Name, string(rv.State), rv.Reason, rv.Message} {
				w.string(s)
			}
			w.optTime(rv.At)
			w.time(rv.Since)
		}
	}
	w.count(len(v.Failures), v.Failures == nil)
	for _, f := range v.Failures {
		w.string(f.Layer)
		w.string(string(f.Class))
		w.string(f.Reason)
		w.string(f.Message)
		w.objects(f.Objects, f.Objects == nil)
		w.time(f.At)
		w.time(f.LastAt)
		w.bool(f.AfterApplied)
		w.string(f.Release.String())
		w.string(f.Remediation)
		w.bool(f.Stalled)
	}
}

// ref reads a Ref written as its text.
func (r *recordReader) ref() rollout.Ref {
	ref, err := rollout.ParseRef(r.string())
	if err != nil && r.err == nil {
		r.err = err
	}
	return ref
}

// view reads what recordWriter.view wrote, in a record of version ver of
// the settled records' (queued mails write the latest).
func (r *recordReader) view(ver byte) *rollout.View {
	v := &rollout.View{}
	var verdict, source string
	for _, s := range []*string{&v.Cluster, &v.Revision, &v.Hash, &v.Origin, &v.OriginHash, &verdict, &v.Summary,
		&v.Subject, &source, &v.ExpectedFrom, &v.RootCause} {
		*s = r.string()
	}
	if err := v.Verdict.UnmarshalText([]byte(verdict)); err != nil && r.err == nil {
		r.err = err
	}
	if err := v.Source.UnmarshalText([]byte(source)); err != nil && r.err == nil {
		r.err = err
	}
	v.Terminal, v.Late = r.bool(), r.bool()
	if ver >= 6 {
		v.Commit = r.string()
	} else {
		v.Commit = flux.GitCommit(v.Revision, v.Origin, v.Source.Kind)
	}
	v.FirstSeen, v.LastSeen, v.Deadline = r.time(), r.time(), r.time()
	v.CompletedAt = r.optTime()
	if r.bool() {
		s := r.string()
		v.SupersededBy = &s
	}
	if r.bool() {
		v.SupersedeKey = &rollout.Key{Cluster: r.string(), Hash: r.string()}
	}
	v.Behind = r.strings()
	if n, isNil := r.count(); !isNil {
		layers := make([]rollout.LayerView, n)
		times := make([]time.Time, 3*n) // each layer's At, Since and Healthy
		for i := range layers {
			l := &layers[i]
			l.Name, l.State, l.Revision, l.Reason, l.Message = r.string(), rollout.LayerState(r.string()), r.string(), r.string(), r.string()
			l.At = r.optTimeIn(&times[3*i])
			if ver >= 2 {
				l.Since, l.Healthy, l.DependsOn = r.optTimeIn(&times[3*i+1]), r.optTimeIn(&times[3*i+2]), r.strings()
			}
			if ver >= 4 {
				l.Releases = r.releases()
			}
		}
		v.Layers = rollout.MakeLayers(layers)
	}
	if n, isNil := r.count(); !isNil {
		v.Failures = make([]rollout.FailureView, n)
		for i := range v.Failures {
			f := &v.Failures[i]
			f.Layer = r.string()
			if ver >= 3 {
				f.Class = rollout.FailureClass(r.string())
			}
			f.Reason, f.Message = r.string(), r.string()
			f.Objects = r.objects()
			f.At, f.LastAt, f.AfterApplied = r.time(), r.time(), r.bool()
			if ver >= 4 {
				f.Release, f.Remediation = r.ref(), r.string()
			}
			if ver >= 5 {
				f.Stalled = r.bool()
			}
		}
	}
	return v
}

func (r *recordReader) releases() []rollout.ReleaseView {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	out := make([]rollout.ReleaseView, n)
	for i := range out {
		rv := &out[i]
		rv.Kind, rv.Namespace, rv.Name, rv.State = r.string(), r.string(), r.string(), rollout.LayerState(r.string())
		rv.Reason, rv.Message, rv.At, rv.Since = r.string(), r.string(), r.optTime(), r.time()
	}
	return out
}

// recordReader reads what recordWriter wrote; the first error sticks and
// every later read returns a zero value.
type recordReader struct {
	b   string
	err error
	// own makes every string its own copy instead of a substring of the
	// record, for what outlives the read: a live rollout's evidence, whose
	// revision and reasons the model shares with later evidence, would keep
	// whole records of it alive.
	own bool
}

// done is the read's error: the first one, or bytes left over.
func (r *recordReader) done() error {
	if r.err == nil && len(r.b) > 0 {
		r.err = fmt.Errorf("%d bytes left over", len(r.b))
	}
	return r.err
}

func (r *recordReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated record: %s", what)
	}
	r.b = ""
}

func (r *recordReader) byte() byte {
	if len(r.b) < 1 {
		r.fail("byte")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}
func (r *recordReader) bool() bool { return r.byte() == 1 }
func (r *recordReader) uvarint() uint64 {
	var n uint64
	var k int
	for shift := uint(0); k < len(r.b) && k < binary.MaxVarintLen64; shift += 7 {
		c := r.b[k]
		k++
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			r.b = r.b[k:]
			return n
		}
	}
	r.fail("length")
	return 0
}

func (r *recordReader) string() string {
	n := r.uvarint()
	if uint64(len(r.b)) < n {
		r.fail("string")
		return ""
	}
	s := r.b[:n]
	r.b = r.b[n:]
	if r.own {
		return strings.Clone(s)
	}
	return s
}
func (r *recordReader) count() (int, bool) {
	n := r.uvarint()
	if n == 0 {
		return 0, true
	}
	if n-1 > uint64(len(r.b)) { // every element takes a byte at least
		r.fail("count")
		return 0, true
	}
	return int(n - 1), false
}
func (r *recordReader) strings() []string {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = r.string()
	}
	return out
}
func (r *recordReader) time() time.Time {
	if !r.bool() {
		return time.Time{}
	}
	if len(r.b) < 8 {
		r.fail("time")
		return time.Time{}
	}
	var u uint64
	for i := range 8 {
		u = u<<8 | uint64(r.b[i])
	}
	t := time.Unix(0, int64(u)).UTC()
	r.b = r.b[8:]
	return t
}
func (r *recordReader) optTime() *time.Time { return r.optTimeIn(new(time.Time)) }

// optTimeIn is optTime into dst, so that a record's many times can share
// one allocation.
func (r *recordReader) optTimeIn(dst *time.Time) *time.Time {
	if !r.bool() {
		return nil
	}
	*dst = r.time()
	return dst
}

// Settled keys are hash, NUL, cluster: a hash prefix is one cursor seek.
func settledKey(k rollout.Key) []byte {
	return append(append([]byte(k.Hash), 0), k.Cluster...)
}

func parseSettledKey(b []byte) (rollout.Key, error) {
	hash, cluster, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return rollout.Key{}, fmt.Errorf("malformed settled key %q", b)
	}
	return rollout.Key{Cluster: string(cluster), Hash: string(hash)}, nil
}

// Origin index keys are origin hash, NUL, settled key.
func originKey(origin string, k rollout.Key) []byte {
	return append(append([]byte(origin), 0), settledKey(k)...)
}

// Time index keys are the first evidence as big-endian Unix nanoseconds,
// then the settled key, so a backward cursor lists newest first. The value
// is the last evidence, which retention goes by.
func timeKey(v *rollout.View) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(v.FirstSeen.UnixNano())), settledKey(rollout.Key{Cluster: v.Cluster, Hash: v.Hash})...)
}

func timeValue(v *rollout.View) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(v.LastSeen.UnixNano()))
}

func parseTimeKey(b []byte) (first time.Time, k rollout.Key, err error) {
	if len(b) < 9 {
		return time.Time{}, rollout.Key{}, fmt.Errorf("malformed time key %q", b)
	}
	k, err = parseSettledKey(b[8:])
	return time.Unix(0, int64(binary.BigEndian.Uint64(b[:8]))).UTC(), k, err
}

// Floor keys are cluster, kind, namespace and name joined by NUL; the value
// is the entry's first evidence (big-endian Unix nanoseconds) and hash.
func floorKey(f rollout.FloorKey) []byte {
	return bytes.Join([][]byte{[]byte(f.Cluster), []byte(f.Emitter.Kind), []byte(f.Emitter.Namespace), []byte(f.Emitter.Name)}, []byte{0})
}

func parseFloorKey(b []byte) (rollout.FloorKey, error) {
	p := bytes.Split(b, []byte{0})
	if len(p) != 4 {
		return rollout.FloorKey{}, fmt.Errorf("malformed floor key %q", b)
	}
	return rollout.FloorKey{Cluster: string(p[0]), Emitter: rollout.Emitter{Kind: string(p[1]), Namespace: string(p[2]), Name: string(p[3])}}, nil
}

// Since schema 6 the emitter's role follows the time, a byte below any hex
// digit, which tells it from the hash that followed the time before.
func floorValue(role rollout.Role, f rollout.Floor) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(f.First.UnixNano()))
	return append(append(b, byte(role)), f.Hash...)
}

// parseFloorValue reads a floor, and the role of its emitter (0 in floors
// before schema 6).
func parseFloorValue(b []byte) (rollout.Floor, rollout.Role, error) {
	if len(b) < 8 {
		return rollout.Floor{}, 0, fmt.Errorf("malformed floor %q", b)
	}
	f := rollout.Floor{First: time.Unix(0, int64(binary.BigEndian.Uint64(b[:8]))).UTC()}
	rest, role := b[8:], rollout.Role(0)
	if len(rest) > 0 && rest[0] < '0' {
		role, rest = rollout.Role(rest[0]), rest[1:]
	}
	f.Hash = string(rest)
	return f, role, nil
}

// Evidence keys are the rollout's sequence number (16 hex digits, so byte
// order is numeric order), cluster, hash, kind, namespace and name, joined
// by NUL, which no Kubernetes name or validated cluster name contains.
// Leading with the sequence keeps the records of recent rollouts, where
// nearly every write goes, on a few adjacent pages: a commit rewrites those
// pages, not pages scattered over the whole file.
func encodeKey(ek rollout.EvidenceKey) []byte {
	return bytes.Join([][]byte{
		fmt.Appendf(nil, "%016x", ek.Seq), []byte(ek.Cluster), []byte(ek.Hash),
		[]byte(ek.Emitter.Kind), []byte(ek.Emitter.Namespace), []byte(ek.Emitter.Name),
	}, []byte{0})
}

func decodeKey(k []byte) (rollout.EvidenceKey, error) {
	p := bytes.Split(k, []byte{0})
	if len(p) != 6 {
		return rollout.EvidenceKey{}, fmt.Errorf("malformed evidence key %q", k)
	}
	seq, err := strconv.ParseUint(string(p[0]), 16, 64)
	if err != nil {
		return rollout.EvidenceKey{}, fmt.Errorf("malformed evidence key %q: %w", k, err)
	}
	return rollout.EvidenceKey{
		Key:     rollout.Key{Cluster: string(p[1]), Hash: string(p[2])},
		Seq:     seq,
		Emitter: rollout.Emitter{Kind: string(p[3]), Namespace: string(p[4]), Name: string(p[5])},
	}, nil
}

// Sequence keys are big-endian, so byte order is numeric order.
func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// An evidence record is one emitter's evidence on one live rollout. Every
// event the engine learns from rewrites one, in the log and later in bbolt,
// and a start reads them all, so it is binary: encoding it took a tenth of
// the time JSON did, and it is about half the size. The first byte is the
// record's version; a record that starts with '{' is the JSON of schema 4
// and before, still read. 2 added each failure's class; the model classes
// the failures of records before when it loads them (Config.ClassOf). 3
// added the emitter's role, which its key does not say (the key's bytes
// stay those of the records before, so that they are found and deleted);
// the model gives a role to the emitters of records before
// (Config.RoleOf). 4 added, when there is any, what is known of releases
// inside layers (Inside: a layer's holds, what a release's status said).
// 5 added what helm-controller did after a release's failure (Remedy).
const evidenceVersion = 5

// encodeEvidence is the record of ev, evidence of an emitter of role.
func encodeEvidence(role rollout.Role, ev *rollout.Evidence) []byte {
	w := &recordWriter{b: make([]byte, 0, evidenceSize(ev))}
	w.byte(evidenceVersion)
	w.byte(byte(role))
	d := ev.Details()
	for _, s := range []string{ev.Revision, d.Origin, d.OriginHash, d.Subject} {
		w.string(s)
	}
	w.list(d.MailTo)
	w.time(ev.First)
	w.time(ev.Last)
	w.mark(ev.Progress)
	w.mark(ev.Succeeded)
	w.time(ev.LastSucceeded)
	w.count(len(ev.Failures), len(ev.Failures) == 0)
	for _, f := range ev.Failures {
		w.string(string(f.Class))
		w.string(f.Reason)
		w.string(f.Message)
		w.time(f.First)
		w.time(f.Last)
		w.objects(f.Objects, len(f.Objects) == 0)
	}
	w.time(d.HealthPassed)
	w.bool(ev.Member != nil)
	if ev.Member != nil {
		w.markFields(ev.Member.Mark)
		w.list(ev.Member.DependsOn)
	}
	w.bool(ev.Inside != nil)
	if in := ev.Inside; in != nil {
		w.releases(in)
	}
	return w.b
}

// releases writes a layer's holds, or what a release's status said.
func (w *recordWriter) releases(in *rollout.Inside) {
	w.count(len(in.Holds), len(in.Holds) == 0)
	for _, h := range in.Holds {
		w.byte(byte(h.Release.Role))
		for _, s := range []string{h.Release.Kind, h.Release.Namespace, h.Release.Name} {
			w.string(s)
		}
		w.time(h.At)
	}
	w.time(in.Watched)
	w.mark(in.Confirmed)
	rm := in.Remedy
	w.bool(rm != nil)
	if rm == nil {
		return
	}
	w.count(len(rm.Steps), rm.Steps == nil)
	for _, s := range rm.Steps {
		w.byte(byte(s.Kind))
		w.uint(uint64(s.Version))
		w.string(s.Reason)
		w.string(s.Error)
		w.time(s.At)
	}
	w.bool(rm.Earlier)
	w.uint(uint64(rm.Attempts))
	w.uint(uint64(rm.Remedied))
	w.mark(rm.Stalled)
}

// list writes ss with an empty list as nil: evidence was JSON with its
// lists omitted when empty, and reads the same either way.
func (w *recordWriter) list(ss []string) {
	if len(ss) == 0 {
		ss = nil
	}
	w.strings(ss)
}

// evidenceSize is about what ev encodes to: the strings, and room for the
// lengths, times and flags.
func evidenceSize(ev *rollout.Evidence) int {
	d := ev.Details()
	n := 128 + len(ev.Revision) + len(d.Origin) + len(d.OriginHash) + len(d.Subject)
	for _, m := range []*rollout.Mark{ev.Progress, ev.Succeeded} {
		if m != nil {
			n += len(m.Reason) + len(m.Message)
		}
	}
	for _, f := range ev.Failures {
		n += 32 + len(f.Reason) + len(f.Message) + 64*len(f.Objects)
	}
	if ev.Inside != nil {
		n += 24 + len(ev.Inside.Holds)*64
		if rm := ev.Inside.Remedy; rm != nil {
			n += 32 + len(rm.Steps)*48
			for _, s := range rm.Steps {
				n += len(s.Error)
			}
			if rm.Stalled != nil {
				n += len(rm.Stalled.Reason) + len(rm.Stalled.Message)
			}
		}
	}
	return n
}

// objects writes the objects a failure names; isNil tells an absent list
// from an empty one.
func (w *recordWriter) objects(objs []rollout.Object, isNil bool) {
	w.count(len(objs), isNil)
	for _, o := range objs {
		for _, s := range []string{o.Kind, o.Namespace, o.Name, o.Error} {
			w.string(s)
		}
		w.time(o.At)
	}
}

func (r *recordReader) objects() []rollout.Object {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	objs := make([]rollout.Object, n)
	for i := range objs {
		o := &objs[i]
		o.Kind, o.Namespace, o.Name, o.Error = r.string(), r.string(), r.string(), r.string()
		o.At = r.time()
	}
	return objs
}

// mark writes an optional mark: a presence flag, then its fields.
func (w *recordWriter) mark(m *rollout.Mark) {
	w.bool(m != nil)
	if m != nil {
		w.markFields(*m)
	}
}

func (w *recordWriter) markFields(m rollout.Mark) {
	w.time(m.At)
	w.byte(byte(m.Signal))
	w.string(m.Reason)
	w.string(m.Message)
}

// decodeEvidence reads an evidence record, and the role of its emitter
// (0 in records before version 3).
func decodeEvidence(b []byte) (*rollout.Evidence, rollout.Role, error) {
	ev := new(rollout.Evidence)
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, ev); err != nil {
			return nil, 0, fmt.Errorf("decode evidence: %w", err)
		}
		return ev, 0, nil
	}
	r := &recordReader{b: string(b), own: true}
	ver := r.byte()
	if (ver < 1 || ver > evidenceVersion) && r.err == nil {
		return nil, 0, fmt.Errorf("evidence of record version %d, this binary reads 1 to %d", ver, evidenceVersion)
	}
	var role rollout.Role
	if ver >= 3 {
		role = rollout.Role(r.byte())
	}
	var d rollout.Detail
	for _, s := range []*string{&ev.Revision, &d.Origin, &d.OriginHash, &d.Subject} {
		*s = r.string()
	}
	d.MailTo = r.strings()
	ev.First, ev.Last = r.time(), r.time()
	ev.Progress, ev.Succeeded = r.mark(), r.mark()
	ev.LastSucceeded = r.time()
	if n, isNil := r.count(); !isNil {
		ev.Failures = make([]rollout.Failure, n)
		for i := range ev.Failures {
			f := &ev.Failures[i]
			if ver >= 2 {
				f.Class = rollout.FailureClass(r.string())
			}
			f.Reason, f.Message = r.string(), r.string()
			f.First, f.Last = r.time(), r.time()
			f.Objects = r.objects()
		}
	}
	d.HealthPassed = r.time()
	if d.Origin != "" || d.OriginHash != "" || d.Subject != "" || d.MailTo != nil || !d.HealthPassed.IsZero() {
		ev.Detail = &d
	}
	if r.bool() {
		ev.Member = &rollout.Member{Mark: r.markFields(), DependsOn: r.strings()}
	}
	if ver >= 4 {
		if r.bool() {
			ev.Inside = &rollout.Inside{Holds: r.holds()}
			ev.Inside.Watched, ev.Inside.Confirmed = r.time(), r.mark()
			if ver >= 5 && r.bool() {
				ev.Inside.Remedy = r.remedy()
			}
		}
	}
	if err := r.done(); err != nil {
		return nil, 0, fmt.Errorf("decode evidence: %w", err)
	}
	return ev, role, nil
}

// remedy reads what recordWriter.releases wrote of a Remedy.
func (r *recordReader) remedy() *rollout.Remedy {
	rm := &rollout.Remedy{}
	if n, isNil := r.count(); !isNil {
		rm.Steps = make([]rollout.Step, n)
		for i := range rm.Steps {
			s := &rm.Steps[i]
			s.Kind, s.Version = rollout.StepKind(r.byte()), int(r.uvarint())
			s.Reason, s.Error, s.At = r.string(), r.string(), r.time()
		}
	}
	rm.Earlier = r.bool()
	rm.Attempts, rm.Remedied = int(r.uvarint()), int(r.uvarint())
	rm.Stalled = r.mark()
	return rm
}

func (r *recordReader) holds() []rollout.Hold {
	n, isNil := r.count()
	if isNil {
		return nil
	}
	out := make([]rollout.Hold, n)
	for i := range out {
		h := &out[i]
		h.Release = rollout.Emitter{Role: rollout.Role(r.byte()), Kind: r.string(), Namespace: r.string(), Name: r.string()}
		h.At = r.time()
	}
	return out
}

func (r *recordReader) mark() *rollout.Mark {
	if !r.bool() {
		return nil
	}
	m := r.markFields()
	return &m
}

func (r *recordReader) markFields() rollout.Mark {
	return rollout.Mark{At: r.time(), Signal: rollout.Signal(r.byte()), Reason: r.string(), Message: r.string()}
}
