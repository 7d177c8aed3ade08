package main

import (
	"os"
	"slices"
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
