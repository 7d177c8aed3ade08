package api

import (
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// The answers with views in them (/verdict, /commits, /rollouts) are
// written by hand, byte for byte what encoding/json makes of the wire
// types below (TestWireIsEncodingJSON holds them to it): reflection, a
// MarshalJSON and a compaction pass for every time, and the allocations
// they made, were half of a settled /verdict's CPU (BenchmarkVerdictSettled).

// jsonWriter appends JSON. ok turns false at a time that has no RFC 3339
// form, which encoding/json refuses too: the caller answers with
// encoding/json then, so that even that case is answered as before.
type jsonWriter struct {
	b  []byte
	ok bool
}

// field starts a member of the object being written.
func (w *jsonWriter) field(name string) {
	if w.b[len(w.b)-1] != '{' {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

// element starts the i-th element of the array being written.
func (w *jsonWriter) element(i int) {
	if i > 0 {
		w.b = append(w.b, ',')
	}
}

const hexDigits = "0123456789abcdef"

// str writes s as encoding/json does: HTML characters, control characters,
// U+2028 and U+2029 escaped, invalid UTF-8 replaced by U+FFFD.
func (w *jsonWriter) str(s string) {
	b := append(w.b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	w.b = append(b, '"')
}

func (w *jsonWriter) strField(name, s string) {
	w.field(name)
	w.str(s)
}

// optStr writes a string field tagged omitempty.
func (w *jsonWriter) optStr(name, s string) {
	if s != "" {
		w.strField(name, s)
	}
}

func (w *jsonWriter) boolean(x bool) { w.b = strconv.AppendBool(w.b, x) }

// time writes t as time.Time.MarshalJSON does, and refuses what it refuses.
func (w *jsonWriter) time(t time.Time) {
	w.b = append(w.b, '"')
	n := len(w.b)
	w.b = t.AppendFormat(w.b, time.RFC3339Nano)
	if !strictRFC3339(w.b[n:]) {
		w.ok = false
	}
	w.b = append(w.b, '"')
}

// strictRFC3339 reports whether b, a time formatted as RFC 3339, is one
// time.Time.MarshalJSON accepts: a year of four digits, a zone offset under
// 24 hours.
func strictRFC3339(b []byte) bool {
	if b[len("2006")] != '-' {
		return false
	}
	if b[len(b)-1] == 'Z' {
		return true
	}
	sign, hh := b[len(b)-len("-07:00")], b[len(b)-len("07:00"):]
	return (sign == '+' || sign == '-') && 10*(hh[0]-'0')+hh[1]-'0' < 24
}

func (w *jsonWriter) timeField(name string, t time.Time) {
	w.field(name)
	w.time(t)
}

func (w *jsonWriter) null() { w.b = append(w.b, "null"...) }

func (w *jsonWriter) timePtr(t *time.Time) {
	if t == nil {
		w.null()
		return
	}
	w.time(*t)
}

// list writes xs as an array, each element with one; nil as null.
func list[T any](w *jsonWriter, xs []T, one func(T)) {
	if xs == nil {
		w.null()
		return
	}
	w.b = append(w.b, '[')
	for i, x := range xs {
		w.element(i)
		one(x)
	}
	w.b = append(w.b, ']')
}

func (w *jsonWriter) strs(ss []string) { list(w, ss, w.str) }

// view writes v's fields as verdictJSON (sup set or not) and viewJSON do:
// the view's own in order, then superseded_by_verdict, then the layers,
// which shadow the view's own (none: an empty list).
func (w *jsonWriter) view(v *rollout.View, sup *rollout.Verdict, layers bool) {
	w.b = append(w.b, '{')
	w.strField("cluster", v.Cluster)
	w.strField("revision", v.Revision)
	w.strField("hash", v.Hash)
	w.optStr("origin_revision", v.Origin)
	w.optStr("origin_hash", v.OriginHash)
	w.optStr("commit", v.Commit)
	w.strField("verdict", v.Verdict.String())
	w.field("terminal")
	w.boolean(v.Terminal)
	w.strField("summary", v.Summary)
	w.optStr("subject", v.Subject)
	w.optStr("source", v.Source.String())
	w.strField("expected_from", v.ExpectedFrom)
	w.timeField("first_seen", v.FirstSeen)
	w.timeField("last_seen", v.LastSeen)
	w.timeField("deadline", v.Deadline)
	w.field("completed_at")
	w.timePtr(v.CompletedAt)
	if v.Late {
		w.field("late")
		w.boolean(true)
	}
	w.field("superseded_by")
	if v.SupersededBy == nil {
		w.null()
	} else {
		w.str(*v.SupersededBy)
	}
	if len(v.Behind) > 0 {
		w.field("behind")
		w.strs(v.Behind)
	}
	w.optStr("root_cause", v.RootCause)
	w.field("failures")
	w.failures(v.Failures)
	if sup != nil {
		w.strField("superseded_by_verdict", sup.String())
	}
	w.field("layers")
	w.b = append(w.b, '[')
	if layers {
		for i := range v.Layers.Len() {
			w.element(i)
			w.layer(v.Layers.At(i))
		}
	}
	w.b = append(w.b, ']', '}')
}

func (w *jsonWriter) layer(l rollout.LayerView) {
	w.b = append(w.b, '{')
	w.strField("name", l.Name)
	w.strField("state", string(l.State))
	w.strField("revision", l.Revision)
	w.strField("reason", l.Reason)
	w.strField("message", l.Message)
	w.field("at")
	w.timePtr(l.At)
	if l.Since != nil {
		w.timeField("since", *l.Since)
	}
	if l.Healthy != nil {
		w.timeField("healthy_at", *l.Healthy)
	}
	if len(l.DependsOn) > 0 {
		w.field("depends_on")
		w.strs(l.DependsOn)
	}
	if len(l.Releases) > 0 {
		w.field("releases")
		list(w, l.Releases, w.release)
	}
	w.b = append(w.b, '}')
}

func (w *jsonWriter) release(rv rollout.ReleaseView) {
	w.b = append(w.b, '{')
	w.strField("kind", rv.Kind)
	w.strField("namespace", rv.Namespace)
	w.strField("name", rv.Name)
	w.strField("state", string(rv.State))
	w.strField("reason", rv.Reason)
	w.strField("message", rv.Message)
	w.field("at")
	w.timePtr(rv.At)
	w.timeField("since", rv.Since)
	w.b = append(w.b, '}')
}

func (w *jsonWriter) failures(fs []rollout.FailureView) {
	list(w, fs, func(f rollout.FailureView) {
		w.b = append(w.b, '{')
		w.strField("layer", f.Layer)
		if f.Class != "" {
			w.strField("class", string(f.Class))
		}
		w.strField("reason", f.Reason)
		w.strField("message", f.Message)
		w.field("objects")
		list(w, f.Objects, w.object)
		w.optStr("release", f.Release.String())
		w.optStr("remediation", f.Remediation)
		if f.Stalled {
			w.field("stalled")
			w.boolean(true)
		}
		w.timeField("at", f.At)
		w.timeField("last_at", f.LastAt)
		if f.AfterApplied {
			w.field("after_applied")
			w.boolean(true)
		}
		w.b = append(w.b, '}')
	})
}

func (w *jsonWriter) object(o rollout.Object) {
	w.b = append(w.b, '{')
	w.strField("kind", o.Kind)
	w.optStr("namespace", o.Namespace)
	w.strField("name", o.Name)
	w.strField("error", o.Error)
	w.timeField("at", o.At)
	w.b = append(w.b, '}')
}

// An answer is written by hand (encode) or, the same JSON, by
// encoding/json from its wire type (wire).
type answer interface {
	encode(w *jsonWriter)
	wire() any
}

// The wire types. The layers are a plain array at a shallower depth,
// hiding the view's own.
type (
	verdictJSON struct {
		VerdictResponse
		Layers []rollout.LayerView `json:"layers"`
	}
	viewJSON struct {
		*rollout.View
		Layers []rollout.LayerView `json:"layers"`
	}
	// rolloutsJSON is RolloutsResponse as the service writes it.
	rolloutsJSON struct {
		Rollouts []viewJSON `json:"rollouts"`
		Next     string     `json:"next,omitempty"`
		Warnings []string   `json:"warnings"`
	}
)

func (r VerdictResponse) wire() any { return verdictJSON{r, r.View.Layers.Slice()} }

func (r VerdictResponse) encode(w *jsonWriter) { w.view(r.View, r.SupersededByVerdict, true) }

// commitAnswer is a commit's verdicts, one a cluster.
type commitAnswer struct {
	hash     string
	verdicts []VerdictResponse
}

func (c commitAnswer) wire() any {
	resp := CommitResponse{Hash: c.hash, Clusters: make([]verdictJSON, len(c.verdicts))}
	for i, r := range c.verdicts {
		resp.Clusters[i] = r.wire().(verdictJSON)
	}
	return resp
}

func (c commitAnswer) encode(w *jsonWriter) {
	w.b = append(w.b, '{')
	w.strField("hash", c.hash)
	w.field("clusters")
	w.b = append(w.b, '[')
	for i, r := range c.verdicts {
		w.element(i)
		r.encode(w)
	}
	w.b = append(w.b, ']', '}')
}

// listing is a page of /rollouts, the views with their layers or with none
// (layers=none: what a client looking for commits needs, at a fraction of
// the bytes for wide rollouts).
type listing struct {
	views    []*rollout.View
	layers   bool
	next     string
	warnings []string
}

func (l listing) wire() any {
	out := make([]viewJSON, len(l.views))
	for i, v := range l.views {
		out[i] = viewJSON{v, []rollout.LayerView{}}
		if l.layers {
			out[i].Layers = v.Layers.Slice()
		}
	}
	return rolloutsJSON{Rollouts: out, Next: l.next, Warnings: l.warnings}
}

func (l listing) encode(w *jsonWriter) {
	w.b = append(w.b, '{')
	w.field("rollouts")
	w.b = append(w.b, '[')
	for i, v := range l.views {
		w.element(i)
		w.view(v, nil, l.layers)
	}
	w.b = append(w.b, ']')
	w.optStr("next", l.next)
	w.field("warnings")
	w.strs(l.warnings)
	w.b = append(w.b, '}')
}

// answers writes the hand-encoded answers from reused buffers.
type answers struct{ bufs sync.Pool }

// maxKept bounds a buffer kept for the next answer: a page of wide
// rollouts can take megabytes, which should not stay for a verdict's 20 KB.
const maxKept = 1 << 20

// write answers status with ans, by hand or, when that met what it cannot
// write, by encoding/json.
func (a *answers) write(w http.ResponseWriter, status int, ans answer) {
	bp, _ := a.bufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	jw := jsonWriter{b: (*bp)[:0], ok: true}
	ans.encode(&jw)
	if !jw.ok {
		edge.WriteJSON(w, status, ans.wire())
	} else {
		jw.b = append(jw.b, '\n') // as json.Encoder ends a value
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(jw.b)))
		w.WriteHeader(status)
		_, _ = w.Write(jw.b)
	}
	if cap(jw.b) <= maxKept {
		*bp = jw.b
		a.bufs.Put(bp)
	}
}
