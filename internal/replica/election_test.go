package replica

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/store"
)

// TestElection: the lease's decisions on synthetic time, one history a
// case: what the election is told, and what it must say to do.
func TestElection(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	l1 := store.Lease{Holder: "a", Epoch: 1}
	l2 := store.Lease{Holder: "a", Epoch: 2}
	down := errors.New("connection refused")
	type step struct {
		in   input
		want []action
	}
	won := func(asked float64, l store.Lease) step {
		return step{input{what: answered, now: at(asked + 0.01), asked: at(asked), lease: l, ok: true},
			[]action{{do: begin, lease: l, at: at(asked + 8)}}}
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"a follower campaigns at every tick until it wins", []step{
			{input{what: tick, now: at(0)}, []action{{do: campaign}}},
			{input{what: answered, now: at(0.01), asked: at(0), ok: false}, nil},
			{input{what: tick, now: at(2)}, []action{{do: campaign}}},
			{input{what: answered, now: at(2.01), asked: at(2), err: down}, nil},
			{input{what: tick, now: at(4)}, []action{{do: campaign}}},
			won(4, l1),
			{input{what: tick, now: at(6)}, []action{{do: renew, lease: l1}}},
		}},
		{"a renewal moves the term's end from when it was asked", []step{
			{input{what: tick, now: at(0)}, []action{{do: campaign}}},
			won(0, l1),
			{input{what: tick, now: at(2)}, []action{{do: renew, lease: l1}}},
			{input{what: answered, now: at(2.5), renewal: true, asked: at(2), lease: l1, ok: true}, []action{{do: extend, lease: l1, at: at(10)}}},
			// The old end's timer, fired late: the term runs on.
			{input{what: timedOut, now: at(8)}, nil},
		}},
		{"the lease another's: the term ends, nothing to give up", []step{
			won(0, l1),
			{input{what: tick, now: at(2)}, []action{{do: renew, lease: l1}}},
			{input{what: answered, now: at(2.01), renewal: true, asked: at(2), lease: l1, ok: false},
				[]action{{do: end, lease: l1, why: "another replica holds the lease"}}},
			{input{what: tick, now: at(4)}, []action{{do: campaign}}},
		}},
		{"the database unreachable: the term ends when it runs out, never later", []step{
			won(0, l1),
			{input{what: tick, now: at(2)}, []action{{do: renew, lease: l1}}},
			{input{what: answered, now: at(4), renewal: true, asked: at(2), lease: l1, err: down}, nil},
			{input{what: tick, now: at(6)}, []action{{do: renew, lease: l1}}},
			{input{what: answered, now: at(8), renewal: true, asked: at(6), lease: l1, err: down}, nil},
			{input{what: timedOut, now: at(8)}, []action{{do: end, lease: l1, why: "the lease ran out before it was renewed", resign: true}}},
			{input{what: timedOut, now: at(9)}, nil},
		}},
		{"an answer about a term no longer held changes nothing", []step{
			won(0, l1),
			{input{what: timedOut, now: at(8)}, []action{{do: end, lease: l1, why: "the lease ran out before it was renewed", resign: true}}},
			{input{what: answered, now: at(8.5), renewal: true, asked: at(6), lease: l1, ok: true}, nil},
			{input{what: tick, now: at(10)}, []action{{do: campaign}}},
			won(10, l2),
			{input{what: answered, now: at(12), renewal: true, asked: at(6), lease: l1, ok: false}, nil},
			{input{what: tick, now: at(12)}, []action{{do: renew, lease: l2}}},
		}},
		{"leading stops on its own: the lease is given up", []step{
			won(0, l1),
			{input{what: leadStopped, now: at(1)}, []action{{do: end, lease: l1, why: "leading failed", resign: true}}},
			{input{what: leadStopped, now: at(1.5)}, nil},
		}},
		{"stopping gives the lease up, once", []step{
			{input{what: stopping, now: at(0)}, nil},
			won(1, l1),
			{input{what: stopping, now: at(2)}, []action{{do: end, lease: l1, why: "stopping", resign: true}}},
			{input{what: stopping, now: at(3)}, nil},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &election{ttl: 10 * time.Second, renew: 2 * time.Second}
			for i, s := range c.steps {
				if got := e.step(s.in); !reflect.DeepEqual(got, s.want) {
					t.Fatalf("step %d (%+v): %+v, want %+v", i, s.in, got, s.want)
				}
			}
		})
	}
}
