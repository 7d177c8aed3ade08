package store

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var at = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func sampleBatch() *rollout.Batch {
	layer := rollout.Emitter{Role: rollout.RoleLayer, Kind: "Kustomization", Namespace: "flux-system", Name: "apps"}
	key := rollout.Key{Cluster: "prod", Hash: strings.Repeat("ab", 20)}
	done := at.Add(90 * time.Second)
	ev := &rollout.Evidence{
		Revision: "main@sha1:" + key.Hash, Detail: &rollout.Detail{Subject: "Add apps", MailTo: []string{"apps@example.com"}},
		First: at, Last: done,
		Progress:  &rollout.Mark{At: at, Signal: rollout.SignalProgressing, Reason: "Progressing", Message: "Deployment/apps/web configured"},
		Succeeded: &rollout.Mark{At: done, Signal: rollout.SignalSucceeded, Reason: "ReconciliationSucceeded", Message: "Reconciliation finished in 2s, next run in 5m0s"},
		Failures: []rollout.Failure{{Reason: "PruneFailed", Message: "delete failed", First: at.Add(time.Minute), Last: at.Add(time.Minute),
			Objects: []rollout.Object{{Kind: "ConfigMap", Namespace: "apps", Name: "old", Error: "forbidden", At: at.Add(time.Minute)}}}},
		Member: &rollout.Member{Mark: rollout.Mark{At: at, Signal: rollout.SignalExpected}, DependsOn: []string{"flux-system/infra"}},
	}
	by := "main@sha1:" + strings.Repeat("cd", 20)
	view := &rollout.View{
		Cluster: key.Cluster, Revision: ev.Revision, Hash: key.Hash, Origin: "v1@sha1:" + strings.Repeat("ef", 20), OriginHash: strings.Repeat("ef", 20),
		Commit:  strings.Repeat("ef", 20), // flux.GitCommit: the origin's
		Verdict: rollout.VerdictSuperseded, Terminal: true, Summary: "superseded by " + by + " before every layer applied it",
		Subject: "Add apps", Source: rollout.Ref{Kind: "GitRepository", Namespace: "flux-system", Name: "fleet"}, ExpectedFrom: rollout.ExpectedFromCluster,
		FirstSeen: at, LastSeen: done, Deadline: at.Add(30 * time.Minute), SupersededBy: &by,
		SupersedeKey: &rollout.Key{Cluster: "prod", Hash: strings.Repeat("cd", 20)},
		Behind:       []string{"flux-system/apps"},
		Layers: rollout.MakeLayers([]rollout.LayerView{{Name: "flux-system/apps", State: rollout.LayerProgressing, Revision: ev.Revision,
			Reason: "Progressing", Message: "Deployment/apps/web configured", At: &at, Since: &at, Healthy: &at,
			DependsOn: []string{"flux-system/infra"}}}),
		Failures: []rollout.FailureView{},
	}
	return &rollout.Batch{
		Puts:   map[rollout.EvidenceKey]*rollout.Evidence{{Key: key, Seq: 7, Emitter: layer}: ev},
		Settle: []*rollout.View{view},
		Floors: map[rollout.FloorKey]rollout.Floor{{Cluster: "prod", Emitter: layer}: {First: at, Hash: key.Hash}},
		Mails:  []rollout.Mail{{Key: "prod\x00" + key.Hash + "\x00applying\x00dev@example.com", Kind: rollout.MailApplying, To: "dev@example.com"}},
		At:     at,
	}
}

// sampleEvidence is the evidence of sampleBatch: every field set.
func sampleEvidence() *rollout.Evidence {
	for _, ev := range sampleBatch().Puts {
		return ev
	}
	panic("sampleBatch has no evidence")
}

// dump renders every record of the file, settled ones inflated, one per
// line: the golden form of the schema.
func dump(t *testing.T, d *DB) string {
	t.Helper()
	var b strings.Builder
	err := d.bolt().View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
			return bk.ForEach(func(k, v []byte) error {
				if bytes.Equal(name, bucketSettled) {
					view, err := decodeSettled(v)
					if err != nil {
						return err
					}
					if raw, err := encodeSettled(view); err != nil || !bytes.Equal(raw, v) {
						return fmt.Errorf("settled record does not re-encode to the same bytes: %v", err)
					}
					raw, err := io.ReadAll(flate.NewReader(bytes.NewReader(v)))
					if err != nil {
						return err
					}
					js, err := json.Marshal(view)
					if err != nil {
						return err
					}
					fmt.Fprintf(&b, "%s %q %q\n  decoded: %s supersede_key=%v\n", name, k, raw, js, *view.SupersedeKey)
					return nil
				}
				if bytes.Equal(name, bucketEvidence) {
					ev, _, err := decodeEvidence(v)
					if err != nil {
						return err
					}
					if !bytes.Equal(encodeEvidence(rollout.RoleLayer, ev), v) {
						return fmt.Errorf("evidence record does not re-encode to the same bytes")
					}
					js, err := json.Marshal(ev)
					if err != nil {
						return err
					}
					fmt.Fprintf(&b, "%s %q %q\n  decoded: %s\n", name, k, v, js)
					return nil
				}
				fmt.Fprintf(&b, "%s %q %q\n", name, k, v)
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestRecordsGolden writes one record of every kind, compares the file
// with the golden one (so that a change of any record's encoding is seen
// and the schema version considered), and reads each back.
func TestRecordsGolden(t *testing.T) {
	d, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b := sampleBatch()
	if err := d.Commit(b); err != nil {
		t.Fatal(err)
	}
	got := dump(t, d)
	golden := filepath.Join("testdata", "records.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("records differ from %s (run with -update if intended, and think about the schema version):\n%s", golden, got)
	}

	var loaded map[rollout.EvidenceKey]*rollout.Evidence
	var mailed []string
	floors := map[rollout.FloorKey]rollout.Floor{}
	loaded = map[rollout.EvidenceKey]*rollout.Evidence{}
	err = d.Load(func(k rollout.EvidenceKey, ev *rollout.Evidence) error { loaded[k] = ev; return nil },
		func(k string) { mailed = append(mailed, k) }, func(k rollout.FloorKey, f rollout.Floor) error { floors[k] = f; return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loaded, b.Puts) || !reflect.DeepEqual(floors, b.Floors) || len(mailed) != 1 || mailed[0] != b.Mails[0].Key {
		t.Fatalf("loaded %+v %+v %q", loaded, floors, mailed)
	}
	v := b.Settle[0]
	back, err := d.Settled(rollout.Key{Cluster: v.Cluster, Hash: v.Hash})
	if err != nil || !reflect.DeepEqual(back, v) {
		t.Fatalf("settled view read back as %+v (%v), want %+v", back, err, v)
	}
	pending, err := d.Pending()
	if err != nil || len(pending) != 1 || !reflect.DeepEqual(pending[0].Mail, b.Mails[0]) {
		t.Fatalf("outbox %+v, %v", pending, err)
	}
	for _, q := range []struct {
		hash           string
		prefix, origin bool
		cluster        string
		want           int
	}{
		{v.Hash, false, false, "", 1},
		{v.Hash[:7], true, false, "", 1},
		{v.Hash[:7], true, false, "staging", 0},
		{v.OriginHash, false, true, "", 1},
		{v.OriginHash[:9], true, true, "prod", 1},
		{v.Hash[:39], false, false, "", 0}, // not a prefix query: exact only
	} {
		keys, err := d.SettledKeys(q.hash, q.prefix, q.origin, q.cluster, 10)
		if err != nil || len(keys) != q.want {
			t.Errorf("SettledKeys(%q, prefix %v, origin %v, %q) = %v, %v; want %d", q.hash, q.prefix, q.origin, q.cluster, keys, err, q.want)
		}
	}
}

// TestTruncatedSettledRecords: a settled record cut anywhere is an error,
// never a panic or a view with fields missing.
func TestTruncatedSettledRecords(t *testing.T) {
	rec, err := encodeSettled(sampleBatch().Settle[0])
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(flate.NewReader(bytes.NewReader(rec)))
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(raw) {
		var buf bytes.Buffer
		w, _ := flate.NewWriter(&buf, flate.BestSpeed)
		w.Write(raw[:n])
		w.Close()
		if v, err := decodeSettled(buf.Bytes()); err == nil {
			t.Fatalf("record cut at %d of %d bytes decoded as %+v", n, len(raw), v)
		}
	}
}

// TestSettledVersion1Decodes: a settled record of version 1 (before the
// layers' first evidence), as the release before wrote it, still decodes
// to the view it held, with the commit it deployed.
func TestSettledVersion1Decodes(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "settled-v1.golden"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	fields := strings.SplitN(lines[0], " ", 3)
	raw, err := strconv.Unquote(fields[2])
	if err != nil || raw[0] != 1 {
		t.Fatalf("the v1 record: %v", err)
	}
	var z bytes.Buffer
	fw, _ := flate.NewWriter(&z, flate.BestSpeed)
	fw.Write([]byte(raw))
	fw.Close()
	v, err := decodeSettled(z.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(v)
	// The view it held: its JSON, and its origin hash, written beside it
	// when views had it in no JSON.
	line := strings.TrimPrefix(strings.TrimSpace(lines[1]), "decoded: ")
	js, rest, _ := strings.Cut(line, " origin_hash=")
	var w rollout.View
	if err := json.Unmarshal([]byte(js), &w); err != nil {
		t.Fatal(err)
	}
	w.OriginHash, _, _ = strings.Cut(rest, " ")
	w.Commit = w.OriginHash // no record before 6 kept it: flux's rule gives it
	if want, _ := json.Marshal(&w); string(got) != string(want) || w.OriginHash == "" {
		t.Fatalf("v1 record decodes to\n%s\nwant\n%s", got, want)
	}
}

// TestCodecReuse: records encoded one after another through the same
// reused flate writers are the bytes a fresh writer makes, and views
// decoded through the same reused buffers stay what they were decoded as,
// each holding its own layers: a view's strings must not alias a buffer
// the next decode overwrites.
func TestCodecReuse(t *testing.T) {
	wide, narrow := wideView(), sampleBatch().Settle[0]
	views := []*rollout.View{wide, narrow, wide}
	var p codec
	var recs [][]byte
	for i, v := range views {
		rec, err := p.encodeSettled(v)
		if err != nil {
			t.Fatal(err)
		}
		if fresh, _ := encodeSettled(v); !bytes.Equal(rec, fresh) {
			t.Fatalf("record %d differs from a fresh writer's", i)
		}
		recs = append(recs, rec)
	}
	var got []*rollout.View
	for _, rec := range recs {
		v, err := p.decodeSettled(rec)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	for i, want := range views {
		g, _ := json.Marshal(got[i])
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Fatalf("view %d changed after later decodes:\n%s\nwant\n%s", i, g, w)
		}
	}
	// The layers' first chunk, by its array: each decode makes its own.
	firstChunk := func(v *rollout.View) uintptr {
		return reflect.ValueOf(v.Layers).FieldByName("chunks").Index(0).Pointer()
	}
	if firstChunk(got[0]) == firstChunk(got[2]) {
		t.Fatal("two decoded views share their layers")
	}
}

// TestEvidenceRecords: evidence reads back as it was written, empty lists
// as none (as the JSON of schema 4 read them), and a schema 4 record, JSON,
// reads as the same evidence.
func TestEvidenceRecords(t *testing.T) {
	empty := &rollout.Evidence{Revision: "main@sha1:" + strings.Repeat("0", 40), First: at, Last: at,
		Detail: &rollout.Detail{MailTo: []string{}}, Failures: []rollout.Failure{{Reason: "HealthCheckFailed", Message: "timeout", First: at, Last: at, Objects: []rollout.Object{}}},
		Member: &rollout.Member{Mark: rollout.Mark{At: at, Signal: rollout.SignalSuspended}, DependsOn: []string{}}}
	oci := &rollout.Evidence{Revision: "latest@sha256:" + strings.Repeat("9", 64),
		Detail: &rollout.Detail{Origin: "main@sha1:" + strings.Repeat("1", 40), OriginHash: strings.Repeat("1", 40), HealthPassed: at.Add(time.Minute)},
		First:  at, Last: at.Add(time.Hour), LastSucceeded: at.Add(time.Hour),
		Progress: &rollout.Mark{At: at, Signal: rollout.SignalWaiting, Reason: "DependencyNotReady", Message: "dependency 'flux-system/infra' is not ready"}}
	for name, ev := range map[string]*rollout.Evidence{"full": sampleEvidence(), "empty lists": empty, "oci": oci, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			rec := encodeEvidence(rollout.RoleLayer, ev)
			got, _, err := decodeEvidence(rec)
			if err != nil {
				t.Fatal(err)
			}
			js, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := decodeEvidence(js)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("binary record reads as\n%+v\nits JSON as\n%+v", got, want)
			}
			if name != "empty lists" && !reflect.DeepEqual(got, ev) {
				t.Fatalf("read back as\n%+v\nwant\n%+v", got, ev)
			}
			if len(rec) >= len(js) {
				t.Errorf("binary record %d bytes, its JSON %d", len(rec), len(js))
			}
		})
	}
}

// TestTruncatedEvidenceRecords: an evidence record cut anywhere, or with a
// byte too many, is an error, never a panic or evidence with fields
// missing.
func TestTruncatedEvidenceRecords(t *testing.T) {
	rec := encodeEvidence(rollout.RoleLayer, sampleEvidence())
	for n := range len(rec) {
		if got, _, err := decodeEvidence(rec[:n]); err == nil {
			t.Fatalf("record cut at %d of %d bytes decoded as %+v", n, len(rec), got)
		}
	}
	if got, _, err := decodeEvidence(append(rec, 0)); err == nil {
		t.Fatalf("record with a byte too many decoded as %+v", got)
	}
	if got, _, err := decodeEvidence(append([]byte{evidenceVersion + 1}, rec[1:]...)); err == nil {
		t.Fatalf("record of a later version decoded as %+v", got)
	}
}
