package main

import (
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestDiskLatency: the floor is measured on a real file in the given
// directory, its percentiles are ordered, and the file is gone afterwards.
func TestDiskLatency(t *testing.T) {
	dir := t.TempDir()
	lat, err := diskLatency(dir, config{rate: 1000, rateFor: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(lat) != 200 {
		t.Errorf("%d arrivals timed, want 200", len(lat))
	}
	if p50, p99 := percentiles(lat); p50 <= 0 || p99 < p50 {
		t.Errorf("p50 %v, p99 %v: want 0 < p50 <= p99", p50, p99)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestGroupCommit: with commits of 5 ms and an arrival every millisecond,
// an arrival waits for the commit under way and then for its own: the
// first arrival 5 ms, the next 9, 8, 7, 6, 5 ms, and so on, each arrival
// once.
func TestGroupCommit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lat, err := groupCommit(11, time.Millisecond, func(int) error {
			time.Sleep(5 * time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ms := time.Millisecond
		want := []time.Duration{5 * ms, 9 * ms, 8 * ms, 7 * ms, 6 * ms, 5 * ms, 9 * ms, 8 * ms, 7 * ms, 6 * ms, 5 * ms}
		if !slices.Equal(lat, want) {
			t.Errorf("latencies %v, want %v", lat, want)
		}
	})
}

// TestSend: a paced run over real HTTP posts every arrival once and times
// each; a refused post is the run's error; a run that runs out of events
// says so only after every post it began has been answered, so none is
// still in flight against the next run's server.
func TestSend(t *testing.T) {
	var posts, status atomic.Int64
	status.Store(http.StatusAccepted)
	url, stop, err := listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A slow answer: posts are still in flight when the sender runs dry.
		time.Sleep(5 * time.Millisecond)
		posts.Add(1)
		w.WriteHeader(int(status.Load()))
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	c := config{rate: 1000, rateFor: 100 * time.Millisecond}

	bare := &server{url: url, repeats: true}
	lat, err := send(client, bare, newEvents([]byte("t"), 20, 5), c)
	if err != nil {
		t.Fatal(err)
	}
	if n := posts.Load(); n != 100 {
		t.Errorf("%d posts, want 100 (going round 20 events)", n)
	}
	if p50, p99 := percentiles(lat); p50 < 5*time.Millisecond || p99 < p50 {
		t.Errorf("p50 %v, p99 %v: want 5ms <= p50 <= p99", p50, p99)
	}

	posts.Store(0)
	svc := &server{url: url}
	if _, err := send(client, svc, newEvents([]byte("t"), 10, 5), c); !errors.Is(err, errDry) {
		t.Errorf("10 events for 100 arrivals: err %v, want %v", err, errDry)
	}
	if n := posts.Load(); n != 10 {
		t.Errorf("%d posts answered when send returned, want all 10", n)
	}

	status.Store(http.StatusServiceUnavailable)
	if _, err := send(client, bare, newEvents([]byte("t"), 20, 5), c); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("refused posts: err %v, want status 503", err)
	}
}

// turns records which server answered each request, in order.
type turns struct {
	mu  sync.Mutex
	log []string
}

// serve starts a server named name that records its requests in t.
func (t *turns) serve(tb testing.TB, name string, repeats bool) *server {
	url, stop, err := listen(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.mu.Lock()
		t.log = append(t.log, name)
		t.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return &server{url: url, repeats: repeats, stop: stop}
}

// runs is the log with repeats folded: the order in which servers took
// their turns.
func (t *turns) runs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Compact(slices.Clone(t.log))
}

// TestSaturateTakesTurns: the sides of a comparison take turns, one whole
// slice each per round, so that a slow spell of the machine lands on both;
// each side's rate counts only its own slices; a side that runs out of
// distinct events is named in the error.
func TestSaturateTakesTurns(t *testing.T) {
	var tr turns
	a, b := tr.serve(t, "a", true), tr.serve(t, "b", true)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	evs := newEvents([]byte("t"), 10, 5)
	c := config{duration: 300 * time.Millisecond, concurrency: 4, rounds: 3}

	rates, err := saturate(client, []target{{"a", a, evs}, {"b", b, evs}}, c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.runs(), []string{"a", "b", "a", "b", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("turns %v, want %v", got, want)
	}
	// Each side's slices add up to c.duration (a little more: a slice
	// waits for its last answers), half the run: a rate over the whole
	// run would be about half of what its own requests give.
	counts := map[string]int{}
	for _, name := range tr.log {
		counts[name]++
	}
	for i, name := range []string{"a", "b"} {
		if own := float64(counts[name]) / c.duration.Seconds(); rates[i] < own*0.7 || rates[i] > own {
			t.Errorf("%s: rate %.0f/s from %d requests in its %v of slices, want at most %.0f/s and not much less",
				name, rates[i], counts[name], c.duration, own)
		}
	}

	dry := &server{url: b.url}
	if _, err := saturate(client, []target{{"a", a, evs}, {"dry", dry, evs}}, c); !errors.Is(err, errDry) || !strings.Contains(err.Error(), "dry") {
		t.Errorf("a side with 10 events: err %v, want %v naming it", err, errDry)
	}
}

// TestPacedTakesTurns: the latency run and its HTTP floor take turns too,
// with the disk's floor in each round, every arrival is timed, and so is
// the machine's CPU time over the service's slices.
func TestPacedTakesTurns(t *testing.T) {
	var tr turns
	bare, svc := tr.serve(t, "bare", true), tr.serve(t, "svc", false)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	c := config{rate: 1000, rateFor: 300 * time.Millisecond, rounds: 3}

	l, err := paced(client, svc, bare, newEvents([]byte("t"), 400, 5), c)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := tr.runs(), []string{"bare", "svc", "bare", "svc", "bare", "svc"}; !slices.Equal(got, want) {
		t.Errorf("turns %v, want %v", got, want)
	}
	if n := len(tr.log); n != 600 {
		t.Errorf("%d requests, want 300 to each side", n)
	}
	for _, p := range [][2]time.Duration{{l.p50, l.p99}, {l.httpP50, l.httpP99}, {l.diskP50, l.diskP99}} {
		if p[0] <= 0 || p[1] < p[0] {
			t.Errorf("p50 %v, p99 %v: want 0 < p50 <= p99 (%+v)", p[0], p[1], l)
		}
	}
	// The service's slices are timed on the machine's CPU clock too: 300
	// ms of two CPUs is about 60 ticks, none if nobody read it.
	if l.cpu.Total <= 0 || l.cpu.Steal < 0 || l.cpu.Steal > l.cpu.Total {
		t.Errorf("CPU over the service's slices %+v, want ticks, steal among them", l.cpu)
	}
}
