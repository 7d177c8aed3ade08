package store

import (
	"bytes"
	"compress/flate"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// TestRecordsRoundTripEveryField encodes values whose every field is
// filled by reflection, and requires them back equal: a field added to a
// view or to evidence without codec support fails here, and so does one
// the codec reads back into the wrong place. Every record type is here
// (settled views, evidence of every role, their keys, floors, queued
// mails, the mail log, the forge outbox). In one seed of two every
// field is set (no nil, no zero), so no field is left out by chance.
func TestRecordsRoundTripEveryField(t *testing.T) {
	p := &codec{}
	for seed := range uint64(300) {
		f := recordFiller{r: rand.New(rand.NewPCG(seed, 11)), full: seed%2 == 0}

		var v rollout.View
		f.fill(reflect.ValueOf(&v).Elem())
		b, err := p.encodeSettled(&v)
		if err != nil {
			t.Fatalf("seed %d: encode settled: %v", seed, err)
		}
		got, err := p.decodeSettled(b)
		if err != nil {
			t.Fatalf("seed %d: decode settled: %v", seed, err)
		}
		if !reflect.DeepEqual(got, &v) {
			t.Fatalf("seed %d: the settled record does not round-trip:\n got %+v\nwant %+v", seed, got, &v)
		}

		var ev rollout.Evidence
		f.fill(reflect.ValueOf(&ev).Elem())
		role := roles[seed%uint64(len(roles))]
		back, backRole, err := decodeEvidence(encodeEvidence(role, &ev))
		if err != nil {
			t.Fatalf("seed %d: decode evidence: %v", seed, err)
		}
		if backRole != role {
			t.Fatalf("seed %d: role %d read back as %d", seed, role, backRole)
		}
		if !reflect.DeepEqual(back, &ev) {
			t.Fatalf("seed %d: the evidence record does not round-trip:\n got %+v\nwant %+v", seed, back, &ev)
		}

		// The inbox's observations, their emitters' roles with them. It is
		// JSON, whose strings are UTF-8: what reaches the model has any
		// other byte replaced, before anything judged it.
		obs := make([]rollout.Observation, 1+f.r.IntN(3))
		for i := range obs {
			f.fill(reflect.ValueOf(&obs[i]).Elem())
			validUTF8(reflect.ValueOf(&obs[i]).Elem())
		}
		enc, err := encodeInbox(obs)
		if err != nil {
			t.Fatalf("seed %d: encode inbox: %v", seed, err)
		}
		if gotObs, err := decodeInbox(enc); err != nil || !reflect.DeepEqual(gotObs, obs) {
			t.Fatalf("seed %d: the inbox entry does not round-trip (%v):\n got %+v\nwant %+v", seed, err, gotObs, obs)
		}

		var q outbox.Queued
		f.fill(reflect.ValueOf(&q).Elem())
		q.Mail.Kind = rollout.MailKind(fillPieces[f.r.IntN(len(fillPieces))])
		q.Dead = false // the bucket says it (DB.list), not the record
		k := seqKey(q.Seq)
		gotQ, err := decodeQueued(k, encodeQueued(q))
		if err != nil {
			t.Fatalf("seed %d: decode queued: %v", seed, err)
		}
		if !reflect.DeepEqual(gotQ, q) {
			t.Fatalf("seed %d: the queued mail does not round-trip:\n got %+v\nwant %+v", seed, gotQ, q)
		}

		var st outbox.MailStatus
		f.fill(reflect.ValueOf(&st).Elem())
		if f.r.IntN(2) == 0 {
			st.State = outbox.MailDead
		}
		st.Dead = st.State == outbox.MailDead // the state says it, not a field of its own
		gotSt, err := decodeMailStatus(encodeMailStatus(st))
		if err != nil {
			t.Fatalf("seed %d: decode mail status: %v", seed, err)
		}
		if !reflect.DeepEqual(gotSt, st) {
			t.Fatalf("seed %d: the mail log record does not round-trip:\n got %+v\nwant %+v", seed, gotSt, st)
		}

		// The keys, and the floors with their roles. A key's fields are
		// names and hashes, which hold no NUL (Kubernetes names, a
		// validated cluster name, hex): its separator.
		var ek rollout.EvidenceKey
		f.fill(reflect.ValueOf(&ek).Elem())
		noNUL(&ek.Cluster, &ek.Hash, &ek.Emitter.Kind, &ek.Emitter.Namespace, &ek.Emitter.Name)
		ek.Emitter.Role = 0 // the record's, not the key's
		if got, err := decodeKey(encodeKey(ek)); err != nil || !reflect.DeepEqual(got, ek) {
			t.Fatalf("seed %d: the evidence key does not round-trip: %+v, %v\nwant %+v", seed, got, err, ek)
		}
		if got, err := parseSettledKey(settledKey(ek.Key)); err != nil || got != ek.Key {
			t.Fatalf("seed %d: the settled key does not round-trip: %+v, %v\nwant %+v", seed, got, err, ek.Key)
		}
		fk := rollout.FloorKey{Cluster: ek.Cluster, Emitter: ek.Emitter}
		if got, err := parseFloorKey(floorKey(fk)); err != nil || got != fk {
			t.Fatalf("seed %d: the floor key does not round-trip: %+v, %v\nwant %+v", seed, got, err, fk)
		}
		fl := rollout.Floor{First: time.Date(2026, 11, 30, 12, 0, 0, int(seed), time.UTC), Hash: fmt.Sprintf("%040x", seed)}
		if gotFl, gotRole, err := parseFloorValue(floorValue(role, fl)); err != nil || gotFl != fl || gotRole != role {
			t.Fatalf("seed %d: the floor does not round-trip: %+v %d, %v\nwant %+v %d", seed, gotFl, gotRole, err, fl, role)
		}

		var pub outbox.Publication
		f.fill(reflect.ValueOf(&pub).Elem())
		pub.Key.Hash = fmt.Sprintf("%040x", seed) // a key's hash is hex (ingest); the cluster may be anything
		gotPub, err := decodePublication(publicationKey(pub.Key), encodePublication(pub))
		if err != nil {
			t.Fatalf("seed %d: decode publication: %v", seed, err)
		}
		if !reflect.DeepEqual(gotPub, pub) {
			t.Fatalf("seed %d: the forge outbox record does not round-trip:\n got %+v\nwant %+v", seed, gotPub, pub)
		}
	}
}

// roles are every role an emitter has, each of which its records keep.
var roles = []rollout.Role{rollout.RoleLayer, rollout.RoleSource, rollout.RoleRelease}

// noNUL makes names and hashes filled at random fit a key: no NUL, and
// never empty (a hash of hex digits, as ingest gives).
func noNUL(ss ...*string) {
	for _, s := range ss {
		*s = strings.ReplaceAll(*s, "\x00", "")
		if *s == "" {
			*s = "x"
		}
	}
}

// TestMailRecordsOfSchema5 reads the JSON outbox and mail-log records a
// schema 5 binary wrote: a mail due before an upgrade is still sent.
func TestMailRecordsOfSchema5(t *testing.T) {
	q, err := decodeQueued(seqKey(9), []byte(`{"mail":{"key":"prod\u0000abc\u0000prune-failed\u0000ops@x","kind":"prune-failed","to":"ops@x",`+
		`"layer":"flux-system/apps","object":{"kind":"ConfigMap","namespace":"apps","name":"old","error":"forbidden","at":"2026-11-30T12:01:00Z"},`+
		`"view":{"cluster":"prod","revision":"main@sha1:abc","hash":"abc","verdict":"failed","terminal":true,"summary":"s","expected_from":"cluster",`+
		`"first_seen":"2026-11-30T12:00:00Z","last_seen":"2026-11-30T12:01:00Z","deadline":"2026-11-30T12:30:00Z","completed_at":null,"superseded_by":null,"layers":[],"failures":[]}},`+
		`"enqueued":"2026-11-30T12:01:00Z","attempts":2,"next_attempt":"2026-11-30T12:02:00Z","last_error":"421 busy"}`))
	if err != nil {
		t.Fatal(err)
	}
	if q.Seq != 9 || q.Mail.Kind != rollout.MailPruneFailed || q.Mail.Object == nil || q.Mail.Object.Name != "old" ||
		q.Mail.View == nil || q.Mail.View.Verdict != rollout.VerdictFailed || q.Attempts != 2 || q.LastError != "421 busy" ||
		!q.NextAttempt.Equal(at.Add(2*time.Minute)) {
		t.Errorf("schema 5 outbox record read as %+v (view %+v)", q, q.Mail.View)
	}
	st, err := decodeMailStatus([]byte(`{"kind":"failed","to":"ops@x","layer":"flux-system/apps","reason":"HealthCheckFailed",` +
		`"enqueued":"2026-11-30T12:00:00Z","state":"retrying","attempts":1,"next_attempt":"2026-11-30T12:05:00Z","error":"421 busy"}`))
	if err != nil {
		t.Fatal(err)
	}
	if st.Kind != rollout.MailFailed || st.State != outbox.MailRetrying || !st.NextAttempt.Equal(at.Add(5*time.Minute)) || st.LastError != "421 busy" {
		t.Errorf("schema 5 mail log record read as %+v", st)
	}
}

// recordFiller fills values by reflection. Times are UTC at nanoseconds,
// as records keep them; lists are nil or not empty, as evidence keeps
// them; the types it cannot fill field by field have a case of their own.
type recordFiller struct {
	r    *rand.Rand
	full bool // every field set
}

var fillPieces = []string{"flux-system/apps", "<b>&</b>", "\x00\xff", "é日本", "Reconciliation finished in 2.31s"}

func (f recordFiller) skip() bool { return !f.full && f.r.IntN(4) == 0 }

func (f recordFiller) fill(v reflect.Value) {
	switch x := v.Addr().Interface().(type) {
	case *time.Time:
		if !f.skip() {
			*x = time.Unix(0, 1+f.r.Int64N(1<<62)).UTC()
		}
		return
	case *rollout.Verdict:
		*x = rollout.Verdict(1 + f.r.IntN(len(rollout.Verdicts())))
		return
	case *rollout.Ref:
		// Kubernetes names have no '/': what the Ref's text relies on.
		if !f.skip() {
			piece := func() string { return strings.ReplaceAll(fillPieces[f.r.IntN(len(fillPieces))], "/", "-") }
			*x = rollout.Ref{Kind: "GitRepository", Namespace: piece(), Name: piece() + string(rune('a'+f.r.IntN(26)))}
		}
		return
	case *rollout.Layers:
		ls := make([]rollout.LayerView, 1+f.r.IntN(40))
		for i := range ls {
			f.fill(reflect.ValueOf(&ls[i]).Elem())
		}
		*x = rollout.MakeLayers(ls)
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fillPieces[f.r.IntN(len(fillPieces))] + string(rune('a'+f.r.IntN(26))))
	case reflect.Bool:
		v.SetBool(f.full || f.r.IntN(2) == 0)
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uint:
		v.SetUint(1 + f.r.Uint64N(200))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1 + f.r.Int64N(100))
	case reflect.Pointer:
		if f.skip() {
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem())
	case reflect.Slice:
		if f.skip() {
			return
		}
		n := 1 + f.r.IntN(3)
		v.Set(reflect.MakeSlice(v.Type(), n, n))
		for i := range v.Len() {
			f.fill(v.Index(i))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if !v.Type().Field(i).IsExported() {
				panic("recordFiller: " + v.Type().String() + " has unexported fields: give it a case")
			}
			f.fill(v.Field(i))
		}
	default:
		panic("recordFiller: no case for " + v.Type().String())
	}
}

// TestRecordsOfSchema5 reads the records a schema 5 binary wrote for
// sampleBatch (testdata/records-schema5.golden: evidence of version 1,
// settled of version 2, outbox and mail log as JSON, floors without the
// emitter's role) back as what was committed.
func TestRecordsOfSchema5(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "records-schema5.golden"))
	if err != nil {
		t.Fatal(err)
	}
	batch := sampleBatch()
	seen := map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		bucket, rest, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, " ") {
			continue
		}
		qk, err := strconv.QuotedPrefix(rest)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		key, _ := strconv.Unquote(qk)
		val, err := strconv.Unquote(strings.TrimPrefix(rest[len(qk):], " "))
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		switch bucket {
		case "evidence":
			ev, _, err := decodeEvidence([]byte(val))
			for _, want := range batch.Puts {
				if err != nil || !reflect.DeepEqual(ev, want) {
					t.Errorf("version 1 evidence read as %+v (%v), want %+v", ev, err, want)
				}
			}
		case "settled":
			var z bytes.Buffer
			fw, _ := flate.NewWriter(&z, flate.BestSpeed)
			fw.Write([]byte(val))
			fw.Close()
			v, err := decodeSettled(z.Bytes())
			if err != nil || !reflect.DeepEqual(v, batch.Settle[0]) {
				t.Errorf("version 2 settled record read as %+v (%v), want %+v", v, err, batch.Settle[0])
			}
		case "outbox":
			q, err := decodeQueued([]byte(key), []byte(val))
			if err != nil || q.Seq != 1 || !reflect.DeepEqual(q.Mail, batch.Mails[0]) || !q.Enqueued.Equal(at) {
				t.Errorf("JSON outbox record read as %+v (%v)", q, err)
			}
		case "floors":
			f, role, err := parseFloorValue([]byte(val))
			for fk, want := range batch.Floors {
				if err != nil || role != 0 || f != want || floorKey(fk) == nil {
					t.Errorf("floor of schema 5 read as %+v, role %d (%v), want %+v", f, role, err, want)
				}
			}
		case "maillog":
			st, err := decodeMailStatus([]byte(val))
			if err != nil || st.Kind != rollout.MailApplying || st.State != outbox.MailWaiting || st.To != "dev@example.com" {
				t.Errorf("JSON mail log record read as %+v (%v)", st, err)
			}
		default:
			continue
		}
		seen[bucket] = true
	}
	if len(seen) != 5 {
		t.Fatalf("read %v of the schema 5 records", seen)
	}
}

// validUTF8 replaces invalid UTF-8 in every string v holds.
func validUTF8(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(strings.ToValidUTF8(v.String(), "\uFFFD"))
	case reflect.Pointer:
		if !v.IsNil() {
			validUTF8(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				validUTF8(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			validUTF8(v.Index(i))
		}
	}
}
