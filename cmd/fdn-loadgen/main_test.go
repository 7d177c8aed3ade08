package main

import (
	"errors"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestDiskLatency: the floor is measured on a real file in the given
// directory, its percentiles are ordered, and the file is gone afterwards.
func TestDiskLatency(t *testing.T) {
	dir := t.TempDir()
	p50, p99, err := diskLatency(dir, config{rate: 1000, rateFor: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if p50 <= 0 || p99 < p50 {
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
	p50, p99, err := send(client, bare, newEvents([]byte("t"), 20, 5), c)
	if err != nil {
		t.Fatal(err)
	}
	if n := posts.Load(); n != 100 {
		t.Errorf("%d posts, want 100 (going round 20 events)", n)
	}
	if p50 < 5*time.Millisecond || p99 < p50 {
		t.Errorf("p50 %v, p99 %v: want 5ms <= p50 <= p99", p50, p99)
	}

	posts.Store(0)
	svc := &server{url: url}
	if _, _, err := send(client, svc, newEvents([]byte("t"), 10, 5), c); !errors.Is(err, errDry) {
		t.Errorf("10 events for 100 arrivals: err %v, want %v", err, errDry)
	}
	if n := posts.Load(); n != 10 {
		t.Errorf("%d posts answered when send returned, want all 10", n)
	}

	status.Store(http.StatusServiceUnavailable)
	if _, _, err := send(client, bare, newEvents([]byte("t"), 20, 5), c); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("refused posts: err %v, want status 503", err)
	}
}
