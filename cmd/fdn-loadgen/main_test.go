package main

import (
	"os"
	"testing"
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
