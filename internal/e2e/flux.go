// Package e2e runs flux-deploy-notifier against real Flux controllers:
// kustomize-controller, helm-controller and notification-controller built
// from their Go modules (tools/), on the real kube-apiserver and etcd of clustertest, with
// commits published as artifacts served on loopback the way
// source-controller serves them. The scenarios are in e2e_test.go, behind
// the e2e build tag: `make e2e` runs them.
package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/cluster/clustertest"
)

// ShardLabel routes a Kustomization to one of three kustomize-controllers
// (Flux's own sharding), each with different feature gates: the shards
// below, and the default one for every other Kustomization.
const ShardLabel = "sharding.fluxcd.io/key"

// Shards of kustomize-controller, by label value: their feature gates.
const (
	// ShardCancel cancels a running health check when a new revision
	// arrives (HealthCheckCanceled).
	ShardCancel = "cancel-health-checks"
	// ShardNoSuccessEvent sends no ReconciliationSucceeded event, only
	// the status says a revision applied.
	ShardNoSuccessEvent = "no-success-event"
)

func shardGates() map[string]string {
	return map[string]string{
		ShardCancel:         "CancelHealthCheckOnNewRevision=true",
		ShardNoSuccessEvent: "DisableCommitStatusEvent=true",
	}
}

// Flux is a running notification-controller, helm-controller and the
// kustomize-controllers of every shard.
type Flux struct {
	// Processes by name, for their logs.
	Processes map[string]*clustertest.Process
}

// Delivery is one line of notification-controller's log about an event it
// received for a Provider.
type Delivery struct {
	// Failed is a delivery to the Alert's Provider given up after its
	// retries ("failed to send notification"); else the event was
	// dispatched to every Alert that matches it ("dispatching event").
	Failed bool
	// Discarded is an event notification-controller dropped as a repeat
	// of one it dispatched within 5 minutes (its rate limit): the object's
	// controller sent that event again, and it was dispatched before.
	Discarded bool
	At        time.Time // when it was logged
	Alert     string    // of a failure
	Name      string    // of the involved object
	Message   string    // of a dispatched event
}

// logTime is the layout of the time Flux's controllers log (their logger
// encodes it as ISO 8601, in milliseconds).
const logTime = "2006-01-02T15:04:05.000Z0700"

// Deliveries reads from notification-controller's log the events about
// objects of namespace it dispatched to a Provider, and the deliveries that
// failed for good (after its retries, within the Provider's timeout), in
// order. A delivery that succeeds is not logged, and a failure does not say
// which event failed: each delivery runs in a goroutine of its own, ended
// by its Provider's timeout, so once the last event was dispatched longer
// ago than that, no delivery is in flight.
func (f *Flux) Deliveries(namespace string) ([]Delivery, error) {
	b, err := os.ReadFile(f.Processes["notification-controller"].Log)
	if err != nil {
		return nil, err
	}
	var out []Delivery
	for _, line := range strings.Split(string(b), "\n") {
		// Console encoding: time, level, logger, message, then JSON fields.
		fields := strings.SplitN(line, "\t", 5)
		if len(fields) < 5 || fields[2] != "event-server" {
			continue
		}
		d := Delivery{Failed: fields[3] == "failed to send notification", Discarded: fields[3] == "Discarding event, rate limiting duplicate events"}
		if !d.Failed && !d.Discarded && fields[3] != "dispatching event" {
			continue
		}
		at, err := time.Parse(logTime, fields[0])
		if err != nil {
			return nil, fmt.Errorf("notification-controller's log: %w", err)
		}
		d.At = at
		var kv struct {
			Object  struct{ Namespace, Name string } `json:"eventInvolvedObject"`
			Alert   struct{ Name string }            `json:"alert"`
			Message string                           `json:"message"`
		}
		if err := json.Unmarshal([]byte(fields[4]), &kv); err != nil || kv.Object.Namespace != namespace {
			continue
		}
		d.Name, d.Message, d.Alert = kv.Object.Name, kv.Message, kv.Alert.Name
		out = append(out, d)
	}
	return out, nil
}

// StartFlux runs the controllers until the test ends and waits until they
// are ready.
func StartFlux(t testing.TB, c *clustertest.Cluster) *Flux {
	t.Helper()
	bin := clustertest.BinDir()
	for _, b := range []string{"kustomize-controller", "notification-controller", "helm-controller"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s is missing: run `make e2ebin` (it builds the Flux controllers into bin/)", b)
		}
	}
	env := []string{"KUBECONFIG=" + c.Kubeconfig, "RUNTIME_NAMESPACE=flux-system"}
	loopback := func() string { return "127.0.0.1:" + strconv.Itoa(c.FreePort(t)) }
	f := &Flux{Processes: map[string]*clustertest.Process{}}
	health := map[string]string{}
	run := func(name, binary string, args ...string) {
		h := loopback()
		health[name] = h
		args = append(args, "--health-addr="+h, "--metrics-addr="+loopback(),
			"--enable-leader-election=false", "--log-encoding=console")
		// A temporary directory of its own: a kustomize-controller that
		// starts clears what it finds in its own, and another cluster's
		// controllers started later must not clear this one's builds.
		tmp := filepath.Join(c.Dir, "tmp-"+name)
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			t.Fatal(err)
		}
		f.Processes[name] = clustertest.StartProcess(t, c.Dir, name, filepath.Join(bin, binary), append(env, "TMPDIR="+tmp), args...)
	}

	events := loopback()
	run("notification-controller", "notification-controller",
		"--events-addr="+events, "--receiverAddr="+loopback(), "--log-level=debug")
	common := []string{"--events-addr=http://" + events,
		// Dependencies are re-checked every 5 s instead of 30 s, to keep
		// the scenarios short.
		"--requeue-dependency=5s"}
	var shards []string
	for shard, gates := range shardGates() {
		shards = append(shards, shard)
		run("kustomize-controller-"+shard, "kustomize-controller", append(common,
			"--watch-label-selector="+ShardLabel+" in ("+shard+")", "--feature-gates="+gates)...)
	}
	slices.Sort(shards)
	run("kustomize-controller", "kustomize-controller", append(common,
		"--watch-label-selector="+ShardLabel+" notin ("+strings.Join(shards, ", ")+")")...)
	// A release's missing dependency is checked again every 5 s.
	run("helm-controller", "helm-controller", "--events-addr=http://"+events, "--requeue-dependency=5s")

	client := &http.Client{Timeout: 2 * time.Second}
	for name, p := range f.Processes {
		p.AwaitReady(t, client, "http://"+health[name]+"/readyz", 2*time.Minute)
	}
	return f
}
