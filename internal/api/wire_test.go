package api

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/edge"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestWireIsEncodingJSON holds the hand-written answers to what
// encoding/json makes of the wire types, byte for byte, on values whose
// every field is filled by reflection: a field added to a view and not to
// the writer fails here.
func TestWireIsEncodingJSON(t *testing.T) {
	var compared, refused int
	for seed := range uint64(400) {
		// One seed in ten may make times encoding/json refuses.
		f := filler{r: rand.New(rand.NewPCG(seed, 7)), bad: seed%10 == 0}
		views := make([]*rollout.View, f.r.IntN(4))
		for i := range views {
			views[i] = f.view()
		}
		ans := []answer{
			listing{views: views, layers: f.r.IntN(2) == 0, next: f.str(), warnings: f.strs()},
			commitAnswer{hash: f.str(), verdicts: []VerdictResponse{}},
		}
		for range 3 {
			r := VerdictResponse{View: f.view()}
			if f.r.IntN(2) == 0 {
				r.SupersededByVerdict = new(rollout.Verdict(f.r.IntN(8)))
			}
			ans = append(ans, r)
			c := ans[1].(commitAnswer)
			c.verdicts = append(c.verdicts, r)
			ans[1] = c
		}
		for _, a := range ans {
			want, err := json.Marshal(a.wire())
			w := jsonWriter{ok: true}
			a.encode(&w)
			switch {
			case err != nil && w.ok:
				t.Fatalf("seed %d, %T: encoding/json refuses it (%v), the writer does not", seed, a, err)
			case err == nil && !w.ok:
				t.Fatalf("seed %d, %T: the writer refuses what encoding/json writes:\n%s", seed, a, want)
			case err == nil && !bytes.Equal(w.b, want):
				t.Fatalf("seed %d, %T:\nwriter:        %s\nencoding/json: %s", seed, a, w.b, want)
			case err == nil:
				compared++
			default:
				refused++
			}
		}
	}
	if compared < 1000 || refused < 10 {
		t.Fatalf("%d answers compared, %d refused by both: the filler lost its spread", compared, refused)
	}
}

func FuzzWireString(f *testing.F) {
	for _, s := range pieces {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		w := jsonWriter{ok: true}
		w.str(s)
		if !bytes.Equal(w.b, want) {
			t.Fatalf("%q:\nwriter:        %s\nencoding/json: %s", s, w.b, want)
		}
	})
}

// pieces are what strings are made of: everything encoding/json escapes
// or replaces, and what it leaves alone.
var pieces = []string{"", "flux-system/apps", "<b>&</b>", `"\`, "\n\t\r\b\f", "\x00\x1f\x7f", "é日本",
	"\u2028\u2029", "\xff", "\xe2\x80", "\xed\xa0\x80", "Reconciliation finished in 2.31s, next run in 10m0s"}

type filler struct {
	r   *rand.Rand
	bad bool // make a time encoding/json refuses now and then
}

func (f filler) str() string {
	var b []byte
	for range f.r.IntN(4) {
		b = append(b, pieces[f.r.IntN(len(pieces))]...)
	}
	return string(b)
}

func (f filler) strs() []string {
	switch f.r.IntN(4) {
	case 0:
		return nil
	case 1:
		return []string{}
	}
	ss := make([]string, 1+f.r.IntN(3))
	for i := range ss {
		ss[i] = f.str()
	}
	return ss
}

// time is mostly an ordinary time in some zone; now and then one
// encoding/json refuses (a year of other than four digits, a zone of 24
// hours or more).
func (f filler) time() time.Time {
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("IST", 5*3600+1800), time.FixedZone("", -3*3600),
		time.FixedZone("", 23*3600+59*60), time.FixedZone("", -23*3600), time.FixedZone("", 45)}
	switch n := f.r.IntN(40); {
	case n == 0:
		return time.Time{}
	case n == 1 && f.bad:
		return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	case n == 2 && f.bad:
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))
	case n == 3 && f.bad:
		return time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)
	case n == 4 && f.bad:
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 100*3600)) // +100:00
	}
	t := time.Unix(f.r.Int64N(1<<35), 0).In(zones[f.r.IntN(len(zones))])
	switch f.r.IntN(3) {
	case 0:
		t = t.Add(time.Duration(f.r.IntN(1e9)))
	case 1:
		t = t.Add(time.Duration(f.r.IntN(1000)) * time.Millisecond)
	}
	return t
}

func (f filler) view() *rollout.View {
	v := &rollout.View{}
	f.fill(reflect.ValueOf(v).Elem())
	return v
}

// fill sets every field of v, recursively: nil, empty or set for pointers
// and slices.
func (f filler) fill(v reflect.Value) {
	switch v.Type() {
	case reflect.TypeFor[time.Time]():
		v.Set(reflect.ValueOf(f.time()))
		return
	case reflect.TypeFor[rollout.Layers]():
		ls := make([]rollout.LayerView, f.r.IntN(4))
		for i := range ls {
			f.fill(reflect.ValueOf(&ls[i]).Elem())
		}
		v.Set(reflect.ValueOf(rollout.MakeLayers(ls)))
		return
	case reflect.TypeFor[rollout.Verdict]():
		v.Set(reflect.ValueOf(rollout.Verdict(f.r.IntN(8))))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(f.str())
	case reflect.Bool:
		v.SetBool(f.r.IntN(2) == 0)
	case reflect.Pointer:
		if f.r.IntN(3) > 0 {
			v.Set(reflect.New(v.Type().Elem()))
			f.fill(v.Elem())
		}
	case reflect.Slice:
		switch n := f.r.IntN(4); n {
		case 0:
		default:
			v.Set(reflect.MakeSlice(v.Type(), n-1, n-1))
			for i := range n - 1 {
				f.fill(v.Index(i))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	default:
		panic("fill: no values for " + v.Type().String())
	}
}

// TestAnswersWrite checks what goes on the wire: json.Encoder's bytes with
// a Content-Length, or, for what the writer refuses, json.Encoder's answer
// itself.
func TestAnswersWrite(t *testing.T) {
	good := VerdictResponse{View: &rollout.View{Cluster: "prod", Hash: "abc", Verdict: rollout.VerdictApplied, FirstSeen: time.Unix(1, 5).UTC()}}
	bad := VerdictResponse{View: &rollout.View{Hash: "abc", FirstSeen: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}
	var a answers
	for _, tc := range []struct {
		name   string
		ans    answer
		length bool
	}{{"written", good, true}, {"refused", bad, false}} {
		t.Run(tc.name, func(t *testing.T) {
			want := httptest.NewRecorder()
			edge.WriteJSON(want, http.StatusOK, tc.ans.wire())
			for range 2 { // the second from a reused buffer
				got := httptest.NewRecorder()
				a.write(got, http.StatusOK, tc.ans)
				if got.Code != want.Code || got.Body.String() != want.Body.String() || got.Header().Get("Content-Type") != "application/json" {
					t.Fatalf("got %d %q %v, want %d %q", got.Code, got.Body, got.Header(), want.Code, want.Body)
				}
				if cl := got.Header().Get("Content-Length"); (cl == strconv.Itoa(got.Body.Len())) != tc.length {
					t.Fatalf("Content-Length %q for %d bytes", cl, got.Body.Len())
				}
			}
		})
	}
}
