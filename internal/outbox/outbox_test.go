package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
)

func TestBackoff(t *testing.T) {
	var got []time.Duration
	for a := 1; a <= 8; a++ {
		got = append(got, outbox.Backoff(a, 15*time.Second, 2*time.Minute))
	}
	want := []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("backoff %v, want %v", got, want)
		}
	}
}

func TestWarnerOncePerText(t *testing.T) {
	var buf bytes.Buffer
	w := outbox.Warner{Log: slog.New(slog.NewTextHandler(&buf, nil))}
	for _, e := range []string{"refused", "refused", "reset", "refused"} {
		w.Warn("send", errors.New(e))
	}
	if n := strings.Count(buf.String(), "msg=send"); n != 3 {
		t.Fatalf("%d lines, want 3 (a repeat is not said again):\n%s", n, buf.String())
	}
}

// Run flushes at once, when woken, and when the retry flush returned is
// due.
func TestRun(t *testing.T) {
	w := outbox.NewWaker()
	w.Wake()
	w.Wake() // one pending already covers it: returns, without a reader

	synctest.Test(t, func(t *testing.T) {
		w := outbox.NewWaker()
		var flushes []time.Time
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() {
			done <- outbox.Run(ctx, w, time.Now, func(context.Context) time.Time {
				flushes = append(flushes, time.Now())
				if len(flushes) == 2 {
					return time.Now().Add(time.Minute) // a retry due
				}
				return time.Time{}
			})
		}()
		synctest.Wait()
		w.Wake()
		synctest.Wait()
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if len(flushes) != 3 || !flushes[0].Equal(start) || !flushes[2].Equal(start.Add(time.Minute)) {
			t.Fatalf("flushes at %v, want at start, on the wake-up, and a minute later", flushes)
		}
	})
}
