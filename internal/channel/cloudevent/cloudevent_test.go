package cloudevent_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/channeltest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/cloudevent"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/channel/cloudevent/cloudeventtest"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/secret"
)

// key is the shared secret, with the trailing newline a Secret's file
// often has: the HMAC is keyed with the bytes as they are.
const key = "s3cret\n"

type rig struct {
	*channeltest.Rig
	srv *cloudeventtest.Server
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{Rig: channeltest.New(t, outbox.Channel{Name: "webhook"})}
	r.srv = cloudeventtest.New([]byte(key), r.Clock.Now)
	t.Cleanup(r.srv.Close)
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	sec, err := secret.NewExactFile(path, "webhook secret")
	if err != nil {
		t.Fatal(err)
	}
	r.Dispatch(cloudevent.New(cloudevent.Options{URL: r.srv.URL, Secret: sec, Links: channeltest.Links(), HTTP: r.srv.Client(), Now: r.Clock.Now, Log: r.Logger}))
	t.Cleanup(func() {
		if v := r.srv.Violations(); len(v) > 0 {
			t.Errorf("requests that break the contract: %q", v)
		}
	})
	return r
}

// TestEventPerVerdictChange: each verdict change is one signed event,
// its type the verdict's, its data what the verdict says.
func TestEventPerVerdictChange(t *testing.T) {
	r := newRig(t)
	r.Publish("prod", rollout.VerdictApplying, rollout.Shown{Expected: 2})
	r.FlushAll()
	r.Clock.Add(time.Minute)
	r.Publish("prod", rollout.VerdictFailed, rollout.Shown{Done: 1, Expected: 2, Summary: "flux-system/apps failed",
		Failure: rollout.ShownFailure{Layer: "flux-system/apps", Release: rollout.Ref{Kind: "HelmRelease", Namespace: "web", Name: "frontend"}, Reason: "UpgradeFailed", Message: "boom", Stalled: true}})
	r.FlushAll()
	es := r.srv.Events()
	if len(es) != 2 || es[0].Type() != "dev.fluxdeploy.rollout.applying" || es[1].Type() != "dev.fluxdeploy.rollout.failed" {
		t.Fatalf("events %v", es)
	}
	e := es[1]
	if e.Source() != "/clusters/prod" || e.Subject() != channeltest.Hash || e.ID() != channeltest.Hash+".2" || !e.Time().Equal(channeltest.T0.Add(time.Minute)) {
		t.Errorf("attributes %s", e)
	}
	var d cloudevent.Data
	if err := json.Unmarshal(e.Data(), &d); err != nil {
		t.Fatal(err)
	}
	want := cloudevent.Data{Cluster: "prod", Revision: "main@sha1:" + channeltest.Hash, Commit: channeltest.Hash, Verdict: "failed", Summary: "flux-system/apps failed",
		LayersApplied: 1, LayersExpected: 2, Failure: &cloudevent.Failure{Layer: "flux-system/apps", HelmRelease: "web/frontend", Reason: "UpgradeFailed", Message: "boom", Stalled: true},
		URL: "https://fdn.example.com/ui/prod/" + channeltest.Hash, CommitURL: "https://github.com/acme/app/commit/" + channeltest.Hash}
	got, _ := json.Marshal(d)
	if w, _ := json.Marshal(want); string(got) != string(w) {
		t.Errorf("data\n%s\nwant\n%s", got, w)
	}
}

// TestRetriedWithTheSameID: a failed delivery (5xx, a 429, an answer lost)
// is retried with the same id, which the receiver takes once; a 4xx is
// dead-lettered with its answer.
func TestRetriedWithTheSameID(t *testing.T) {
	r := newRig(t)
	r.srv.Answer(http.StatusServiceUnavailable, http.StatusTooManyRequests)
	r.Publish("prod", rollout.VerdictApplied, rollout.Shown{Done: 2, Expected: 2, Completed: channeltest.T0})
	if next := r.Flush(); next.IsZero() {
		t.Fatal("a 503 is not retried")
	}
	r.Clock.Add(time.Hour)
	if next := r.Flush(); !next.Equal(r.Clock.Now().Add(30 * time.Second)) {
		t.Fatalf("after a 429, next %v", next)
	}
	r.Clock.Add(30 * time.Second)
	r.FlushAll()
	// The answer lost: the record says it is due again, as after a crash
	// between the POST and the record.
	if err := r.DB.Channel("webhook").UpdatePublication(rollout.Key{Cluster: "prod", Hash: channeltest.Hash}, func(p *outbox.Publication) { p.SentSeq = 0 }); err != nil {
		t.Fatal(err)
	}
	r.FlushAll()
	if n, rep := len(r.srv.Events()), r.srv.Repeats(); n != 1 || rep != 1 {
		t.Fatalf("%d events, %d repeats: want one event, received twice with its id", n, rep)
	}
	r.srv.Answer(http.StatusGone)
	r.Publish("staging", rollout.VerdictApplied, rollout.Shown{Done: 1, Expected: 1, Completed: channeltest.T0})
	r.Flush()
	if p := r.Record("staging"); !p.Dead || !strings.Contains(p.LastError, "410 Gone") {
		t.Fatalf("record %+v", p)
	}
}

// TestWrongSecretRefused: a receiver with another key refuses (401): the
// signature is the check.
func TestWrongSecretRefused(t *testing.T) {
	r := newRig(t)
	other := cloudeventtest.New([]byte("another"), r.Clock.Now)
	defer other.Close()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	sec, _ := secret.NewExactFile(path, "webhook secret")
	r.Dispatch(cloudevent.New(cloudevent.Options{URL: other.URL, Secret: sec, HTTP: other.Client(), Now: r.Clock.Now, Log: r.Logger}))
	r.Publish("prod", rollout.VerdictApplied, rollout.Shown{Done: 1, Expected: 1, Completed: channeltest.T0})
	r.Flush()
	if p := r.Record("prod"); !p.Dead || !strings.Contains(p.LastError, "401") {
		t.Fatalf("record %+v", p)
	}
}

// TestSubjectIsTheCommit: an OCI artifact built from a commit is named by
// that commit (its origin), not by the artifact's digest.
func TestSubjectIsTheCommit(t *testing.T) {
	r := newRig(t)
	digest := strings.Repeat("d", 64)
	k := rollout.Key{Cluster: "prod", Hash: digest}
	p := rollout.Published{Key: k, Verdict: rollout.VerdictApplied, At: r.Clock.Now(),
		Shown: rollout.Shown{Revision: "latest@sha256:" + digest, Commit: channeltest.Hash, Done: 1, Expected: 1, Completed: r.Clock.Now()}}
	if err := r.DB.Commit(&rollout.Batch{Published: []rollout.Published{p}, At: r.Clock.Now()}); err != nil {
		t.Fatal(err)
	}
	r.FlushAll()
	if es := r.srv.Events(); len(es) != 1 || es[0].Subject() != channeltest.Hash {
		t.Fatalf("events %v: want the subject %s, the commit", es, channeltest.Hash)
	}
}
