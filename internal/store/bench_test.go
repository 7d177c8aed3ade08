package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
)

// wideView is a settled rollout of 85 applied layers, as the fleet's are.
func wideView() *rollout.View {
	v := sampleBatch().Settle[0]
	var layers []rollout.LayerView
	for i := range 85 {
		at := at.Add(time.Duration(i) * time.Second)
		layers = append(layers, rollout.LayerView{Name: fmt.Sprintf("flux-system/src-042-l%02d", i), State: rollout.LayerApplied,
			Revision: v.Revision, Reason: "ReconciliationSucceeded", Message: "Reconciliation finished in 2.31s, next run in 10m0s", At: &at})
	}
	v.Layers = rollout.MakeLayers(layers)
	return v
}

func BenchmarkDecodeSettled(b *testing.B) {
	rec, err := encodeSettled(wideView())
	if err != nil {
		b.Fatal(err)
	}
	var p codec
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.decodeSettled(rec); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(rec)), "record-bytes")
}

// BenchmarkEncodeSettled is the record settling writes for each rollout.
func BenchmarkEncodeSettled(b *testing.B) {
	v := wideView()
	var p codec
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.encodeSettled(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckpoint is the commit that moves the log's records into
// bbolt: 2,048 layers' evidence of revisions rolling across 1,000 layers,
// over a live set of 20,000 records.
func BenchmarkCheckpoint(b *testing.B) {
	db, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	r := &rolling{width: 1000, live: 20}
	commit := func() {
		if err := db.Commit(r.batch(128)); err != nil {
			b.Fatal(err)
		}
	}
	for r.next < r.live*r.width {
		commit()
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for !db.log().needsCheckpoint() {
			commit()
		}
		b.StartTimer()
		commit()
	}
}

// BenchmarkEvidence is what every event the engine learns from costs the
// store to encode (into the log, then bbolt) and a start to decode: a
// layer's evidence with a progress and a success mark, in this binary
// record and in the JSON of schema 4.
func BenchmarkEvidence(b *testing.B) {
	ev := &rollout.Evidence{Revision: "main@sha1:" + fmt.Sprintf("%040x", 42), First: at, Last: at.Add(time.Minute), LastSucceeded: at.Add(time.Minute),
		Progress:  &rollout.Mark{At: at, Signal: rollout.SignalProgressing, Reason: "Progressing", Message: "Deployment/apps/web configured\nService/apps/web unchanged"},
		Succeeded: &rollout.Mark{At: at.Add(time.Minute), Signal: rollout.SignalSucceeded, Reason: "ReconciliationSucceeded", Message: "Reconciliation finished in 2.31s, next run in 10m0s"},
		Detail:    &rollout.Detail{HealthPassed: at.Add(30 * time.Second)}}
	js, _ := json.Marshal(ev)
	rec := encodeEvidence(rollout.RoleLayer, ev)
	for _, c := range []struct {
		name string
		f    func() error
		size int
	}{
		{"encode/binary", func() error { encodeEvidence(rollout.RoleLayer, ev); return nil }, len(rec)},
		{"encode/json", func() error { _, err := json.Marshal(ev); return err }, len(js)},
		{"decode/binary", func() error { _, _, err := decodeEvidence(rec); return err }, len(rec)},
		{"decode/json", func() error { _, _, err := decodeEvidence(js); return err }, len(js)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.f(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(c.size), "record-bytes")
		})
	}
}
