package episode

import (
	"testing"
	"time"
)

// TestEpisodes: the first failure begins an episode and the others join
// it; a success ends it with its count and beginning, and a success with
// none under way says nothing.
func TestEpisodes(t *testing.T) {
	var tr Tracker
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	if _, _, ended := tr.Ok(); ended {
		t.Fatal("a success with no episode ended one")
	}
	if since, _, _ := tr.UnderWay(); !since.IsZero() {
		t.Fatal("an episode under way before any failure")
	}
	for i := range 3 {
		if began := tr.Fail(t0.Add(time.Duration(i)*time.Second), "disk full "+string(rune('a'+i))); began != (i == 0) {
			t.Fatalf("failure %d began an episode: %v", i, began)
		}
	}
	if since, n, last := tr.UnderWay(); !since.Equal(t0) || n != 3 || last != "disk full c" {
		t.Fatalf("under way: since %v, %d failures, last %q", since, n, last)
	}
	if n, since, ended := tr.Ok(); !ended || n != 3 || !since.Equal(t0) {
		t.Fatalf("the success ended %v an episode of %d failures since %v", ended, n, since)
	}
	if since, n, _ := tr.UnderWay(); !since.IsZero() || n != 0 {
		t.Fatal("the episode is still under way after a success")
	}
	if _, _, ended := tr.Ok(); ended {
		t.Fatal("a second success ended an episode again")
	}
	if !tr.Fail(t0.Add(time.Hour), "again") {
		t.Fatal("a failure after the success did not begin a new episode")
	}
}
