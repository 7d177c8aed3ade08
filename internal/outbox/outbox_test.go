package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/outbox"
	"github.com/flux-deploy-notifier/flux-deploy-notifier/internal/rollout"
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

var now = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		name           string
		status         int
		header         http.Header
		retry, limited bool
		after          time.Duration
	}{
		{"429 with Retry-After", 429, http.Header{"Retry-After": {"30"}}, true, true, 30 * time.Second},
		{"429 without", 429, nil, true, true, time.Minute},
		{"secondary limit", 403, http.Header{"Retry-After": {"61"}}, true, true, 61 * time.Second},
		{"primary limit exhausted", 403, http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {strconv.FormatInt(now.Add(90*time.Second).Unix(), 10)}}, true, true, 90 * time.Second},
		{"Retry-After as a date", 429, http.Header{"Retry-After": {now.Add(2 * time.Minute).Format(http.TimeFormat)}}, true, true, 2 * time.Minute},
		{"forbidden", 403, http.Header{"X-Ratelimit-Remaining": {"4999"}}, false, false, 0},
		{"502", 502, nil, true, false, 0},
		{"503 with Retry-After", 503, http.Header{"Retry-After": {"5"}}, true, false, 5 * time.Second},
		{"401", 401, nil, false, false, 0},
		{"404", 404, nil, false, false, 0},
		{"422", 422, nil, false, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := c.header
			if h == nil {
				h = http.Header{}
			}
			e := outbox.Classify(c.status, h, "msg", now)
			if e.Retry != c.retry || e.Limited != c.limited || e.After != c.after {
				t.Fatalf("%+v: want retry %v, limited %v, after %v", e, c.retry, c.limited, c.after)
			}
		})
	}
	if e := outbox.AsError(errors.New("connection refused")); !e.Retry || e.Status != 0 {
		t.Fatalf("a network error: %+v, want transient", e)
	}
}

// boxOf is an outbox in memory whose writes the test can hold up: each
// UpdatePublications is one transaction.
type boxOf struct {
	mu     sync.Mutex
	reads  int // Publications calls: one a flush
	recs   map[rollout.Key]*outbox.Publication
	txns   int
	gate   chan struct{} // each write waits for a token, when set
	writes chan int      // each write's size, when set
}

func (b *boxOf) Publications() ([]outbox.Publication, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads++
	var out []outbox.Publication
	for _, p := range b.recs {
		if p.Due() {
			out = append(out, *p)
		}
	}
	slices.SortFunc(out, func(a, b outbox.Publication) int { return strings.Compare(a.Key.Hash, b.Key.Hash) })
	return out, nil
}

func (b *boxOf) UpdatePublications(ups []outbox.Update) error {
	if b.writes != nil {
		b.writes <- len(ups)
	}
	if b.gate != nil {
		<-b.gate
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.txns++
	for _, u := range ups {
		u.Apply(b.recs[u.Key])
	}
	return nil
}

// settledReads is how many times the outbox was read, once every
// goroutine of the synctest bubble is blocked.
func (b *boxOf) settledReads() int {
	synctest.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.reads
}

// deliverFunc is a Deliverer of a function.

type deliverFunc func(ctx context.Context, p outbox.Publication, save func(string)) error

func (deliverFunc) Name() string { return "test" }
func (f deliverFunc) Deliver(ctx context.Context, p outbox.Publication, save func(string)) error {
	return f(ctx, p, save)
}

// TestOutcomesInBatches: the outcomes of a burst are written in a
// handful of transactions, those that came while one was being written
// in the next (here, the first write held until every delivery was made:
// at most three transactions for 50 deliveries), every one written when
// Flush returns, a record the deliverer saved with its outcome.
func TestOutcomesInBatches(t *testing.T) {
	box := &boxOf{recs: map[rollout.Key]*outbox.Publication{}, gate: make(chan struct{}), writes: make(chan int, 100)}
	const n = 50
	for i := range n {
		k := rollout.Key{Cluster: "prod", Hash: fmt.Sprintf("%03d", i)}
		box.recs[k] = &outbox.Publication{Key: k, Verdict: rollout.VerdictApplied, Seq: 1}
	}
	delivered, all := 0, make(chan struct{})
	to := deliverFunc(func(_ context.Context, p outbox.Publication, save func(string)) error {
		save("ref-" + p.Key.Hash)
		if delivered++; delivered == n {
			close(all)
		}
		return nil
	})
	d := outbox.NewDispatcher(box, to, outbox.DispatchConfig{AlertAfter: time.Hour, Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	done := make(chan struct{})
	go func() {
		d.Flush(context.Background())
		close(done)
	}()
	<-box.writes // the first outcomes' (one or more): held until every delivery is made
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatal("the deliveries wait for their outcomes to be written")
	}
	close(box.gate) // let every write through
	<-done
	// The held one; the rest, but for the last delivery's outcome, which
	// may come after the writer took them.
	if box.txns < 1 || box.txns > 3 {
		t.Errorf("%d transactions for a burst of %d, want at most three", box.txns, n)
	}
	for k, p := range box.recs {
		if p.SentSeq != 1 || p.Sent != rollout.VerdictApplied || p.Ref != "ref-"+k.Hash {
			t.Fatalf("%s not recorded delivered, with its record, when Flush returned: %+v", k.Hash, p)
		}
	}
}

// TestPacedProgressDoesNotWake: once a rollout was shown, its progress
// published within the pace does not wake the dispatcher (the Flush at the
// pace's end delivers the latest, and no outbox read happens meanwhile);
// another rollout, a new verdict, and progress after the pace do.
func TestPacedProgressDoesNotWake(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pace = 5 * time.Second
		k, other := rollout.Key{Cluster: "prod", Hash: "k"}, rollout.Key{Cluster: "prod", Hash: "other"}
		box := &boxOf{recs: map[rollout.Key]*outbox.Publication{
			k:     {Key: k, Verdict: rollout.VerdictApplying, Seq: 1},
			other: {Key: other, Verdict: rollout.VerdictApplied, Seq: 1, SentSeq: 1},
		}}
		var delivered []string
		to := deliverFunc(func(_ context.Context, p outbox.Publication, _ func(string)) error {
			delivered = append(delivered, p.Key.Hash+" "+p.Verdict.String())
			return nil
		})
		d := outbox.NewDispatcher(box, to, outbox.DispatchConfig{AlertAfter: time.Hour, Pace: pace, Log: slog.New(slog.DiscardHandler), Now: time.Now})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go d.Run(ctx)
		reads := box.settledReads
		publish := func(key rollout.Key, v rollout.Verdict, progress bool) {
			box.mu.Lock()
			box.recs[key].Verdict = v
			box.recs[key].Seq++
			box.mu.Unlock()
			d.Published([]rollout.Published{{Key: key, Verdict: v, Progress: progress}})
		}
		if n := reads(); n != 1 || len(delivered) != 1 {
			t.Fatalf("start: %d reads, delivered %q", n, delivered)
		}
		// Shown just now, not paced when that Flush ran: woken, and paced.
		publish(k, rollout.VerdictApplying, true)
		if n := reads(); n != 2 || len(delivered) != 1 {
			t.Fatalf("progress after a delivery: %d reads, delivered %q", n, delivered)
		}
		publish(k, rollout.VerdictApplying, true)
		if n := reads(); n != 2 {
			t.Fatalf("progress within the pace read the outbox: %d reads", n)
		}
		publish(other, rollout.VerdictApplying, false)
		if n := reads(); n != 3 || len(delivered) != 2 {
			t.Fatalf("another rollout's verdict: %d reads, delivered %q", n, delivered)
		}
		publish(k, rollout.VerdictApplied, false)
		if n := reads(); n != 4 || delivered[2] != "k applied" {
			t.Fatalf("a new verdict within the pace: %d reads, delivered %q", n, delivered)
		}
		publish(k, rollout.VerdictApplied, true)
		if n := reads(); n != 5 || len(delivered) != 3 {
			t.Fatalf("progress after a delivery: %d reads, delivered %q", n, delivered)
		}
		publish(k, rollout.VerdictApplied, true)
		if n := reads(); n != 5 {
			t.Fatalf("progress within the pace read the outbox: %d reads", n)
		}
		time.Sleep(pace)
		if n := reads(); n != 6 || len(delivered) != 4 || delivered[3] != "k applied" {
			t.Fatalf("at the pace's end: %d reads, delivered %q", n, delivered)
		}
	})
}

// mailBox is a mail outbox in memory; Sent fails while failSent is set.
type mailBox struct {
	mu       sync.Mutex
	queued   map[uint64]outbox.Queued // waiting and dead
	sent     []uint64
	failSent bool
	records  int // calls of Record
}

func (b *mailBox) Pending() ([]outbox.Queued, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []outbox.Queued
	for seq := range uint64(len(b.queued) + len(b.sent) + 1) {
		if q, ok := b.queued[seq]; ok && !q.Dead {
			out = append(out, q)
		}
	}
	return out, nil
}

func (b *mailBox) Sent(seq uint64, _ time.Time) error {
	// A write that takes time: in a synctest bubble, the time passes only
	// once every other goroutine waits, so a burst that went on before
	// this returned would always be seen doing so.
	time.Sleep(time.Millisecond)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failSent {
		return errors.New("the store is unreachable")
	}
	delete(b.queued, seq)
	b.sent = append(b.sent, seq)
	return nil
}

func (b *mailBox) Record(q outbox.Queued) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.records++
	b.queued[q.Seq] = q
	return nil
}

// burster delivers mails a burst at a time: what each Seq answers
// (nil: sent), and the recorded sends it saw before each delivery.
type burster struct {
	box     *mailBox
	answer  map[uint64]error
	bursts  int
	before  map[uint64]int // how many mails were recorded sent when it went
	untried int
}

func (burster) Name() string { return "smtp" }
func (b *burster) Deliver(context.Context, outbox.Queued, func(string)) error {
	panic("a Burster is given bursts")
}
func (b *burster) DeliverEach(ctx context.Context, qs []outbox.Queued, done func(int, error)) {
	b.bursts++
	for i, q := range qs {
		if ctx.Err() != nil {
			b.untried++
			continue
		}
		b.box.mu.Lock()
		b.before[q.Seq] = len(b.box.sent)
		b.box.mu.Unlock()
		done(i, b.answer[q.Seq])
	}
}

// TestMailsThroughTheOneDispatcher: the mail outbox goes through the
// dispatcher every channel has: a burst to a Burster, each outcome
// recorded before the next mail goes (a crash repeats at most the one
// under way), a transient failure retried with the one backoff rule (up
// to MaxBackoff), a refusal for good dead-lettered; a sent mail whose
// record fails stops the burst and is tried again after a backoff, not
// at once.
func TestMailsThroughTheOneDispatcher(t *testing.T) {
	synctest.Test(t, testMailsThroughTheOneDispatcher)
}

func testMailsThroughTheOneDispatcher(t *testing.T) {
	box := &mailBox{queued: map[uint64]outbox.Queued{}}
	for seq := uint64(1); seq <= 5; seq++ {
		box.queued[seq] = outbox.Queued{Seq: seq, Enqueued: now, Mail: rollout.Mail{Kind: rollout.MailApplied, To: "ops@example.com"}}
	}
	to := &burster{box: box, before: map[uint64]int{}, answer: map[uint64]error{
		2: &outbox.Error{Retry: true, Message: "451 try later"},
		4: &outbox.Error{Message: "554 no such user"},
	}}
	clock := now
	var logs bytes.Buffer
	d := outbox.NewMailDispatcher(box, to, outbox.DispatchConfig{
		AlertAfter: time.Hour, MaxBackoff: 30 * time.Minute, OneByOne: true, What: "mail",
		Log: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return clock },
	})
	next := d.Flush(context.Background())
	if to.bursts != 1 || !slices.Equal(box.sent, []uint64{1, 3, 5}) {
		t.Fatalf("%d bursts, sent %v: want one burst, 1, 3 and 5 sent", to.bursts, box.sent)
	}
	if to.before[3] != 1 || to.before[5] != 2 {
		t.Fatalf("recorded sent before each delivery: %v, want each earlier one recorded", to.before)
	}
	if q := box.queued[2]; q.Attempts != 1 || !q.NextAttempt.Equal(now.Add(15*time.Second)) || !next.Equal(q.NextAttempt) {
		t.Fatalf("a transient failure: %+v, next flush %v", q, next)
	}
	if q := box.queued[4]; !q.Dead || !strings.Contains(q.LastError, "554") || !strings.Contains(logs.String(), "smtp refused the mail for good, dead-lettered") {
		t.Fatalf("a refusal for good: %+v\n%s", q, logs.String())
	}
	// Retried with the one rule: 15 s doubling, up to MaxBackoff.
	var waits []time.Duration
	for range 10 {
		clock = next
		next = d.Flush(context.Background())
		waits = append(waits, next.Sub(clock))
	}
	if waits[0] != 30*time.Second || waits[9] != 30*time.Minute {
		t.Fatalf("waits %v: want doubling from 30 s up to 30 min", waits)
	}
	if n, _, why := d.Stuck(time.Hour); n != 1 || why != "451 try later" {
		t.Fatalf("stuck %d (%q), want the mail retried for hours", n, why)
	}

	// The store fails to record a sent mail: the burst stops there.
	delete(to.answer, 2)
	box.queued[6] = outbox.Queued{Seq: 6, Enqueued: clock, Mail: rollout.Mail{Kind: rollout.MailApplied, To: "ops@example.com"}}
	box.failSent = true
	clock = next
	next = d.Flush(context.Background())
	if to.untried != 1 || len(box.sent) != 3 || !next.Equal(clock.Add(15*time.Second)) {
		t.Fatalf("record failed: %d untried, sent %v, next %v: want the burst stopped, tried again in 15 s", to.untried, box.sent, next)
	}
	if n, _, _ := d.Stuck(-time.Second); n != 2 {
		t.Fatalf("%d mails left waiting, want 2: the unrecorded one, once, and the untried", n)
	}
	box.failSent = false
	clock = next
	if next := d.Flush(context.Background()); !next.IsZero() || !slices.Equal(box.sent, []uint64{1, 3, 5, 2, 6}) {
		t.Fatalf("the store back: sent %v, next %v", box.sent, next)
	}
}

// mailFunc delivers a mail one at a time.
type mailFunc func(ctx context.Context, q outbox.Queued, save func(string)) error

func (mailFunc) Name() string { return "test" }
func (f mailFunc) Deliver(ctx context.Context, q outbox.Queued, save func(string)) error {
	return f(ctx, q, save)
}

// TestMailOutcomesAsRecorded: the mail outbox records each outcome as
// what it is (the change says, not the record): a deliverer's saved
// reference writes nothing for a mail, a retry writes the mail once, and
// a sent mail goes to the mail log, not back to the outbox.
func TestMailOutcomesAsRecorded(t *testing.T) {
	box := &mailBox{queued: map[uint64]outbox.Queued{1: {Seq: 1, Enqueued: now}}}
	answer := error(&outbox.Error{Retry: true, Message: "451 try later"})
	to := mailFunc(func(_ context.Context, _ outbox.Queued, save func(string)) error {
		save("ref")
		return answer
	})
	clock := now
	d := outbox.NewMailDispatcher(box, to, outbox.DispatchConfig{AlertAfter: time.Hour, OneByOne: true, What: "mail",
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return clock }})
	clock = d.Flush(context.Background())
	if q := box.queued[1]; box.records != 1 || q.Attempts != 1 || len(box.sent) != 0 {
		t.Fatalf("retried: %d records, %+v, sent %v: want the one retry recorded", box.records, q, box.sent)
	}
	answer = nil
	d.Flush(context.Background())
	if _, queued := box.queued[1]; box.records != 1 || queued || !slices.Equal(box.sent, []uint64{1}) {
		t.Fatalf("sent: %d records, still queued %v, sent %v: want it in the mail log alone", box.records, queued, box.sent)
	}
}

// TestWokenOnlyByWhatItTakes: a channel that takes no progress (the
// forge's) is not woken by a rollout's progress, only by a verdict.
func TestWokenOnlyByWhatItTakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		k := rollout.Key{Cluster: "prod", Hash: "k"}
		box := &boxOf{recs: map[rollout.Key]*outbox.Publication{}}
		to := deliverFunc(func(context.Context, outbox.Publication, func(string)) error { return nil })
		d := outbox.NewDispatcher(box, to, outbox.DispatchConfig{AlertAfter: time.Hour, Takes: outbox.ForgeChannel().Takes, Log: slog.New(slog.DiscardHandler), Now: time.Now})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go d.Run(ctx)
		reads := box.settledReads
		if n := reads(); n != 1 {
			t.Fatalf("start: %d reads", n)
		}
		d.Published([]rollout.Published{{Key: k, Verdict: rollout.VerdictApplying, Progress: true}})
		if n := reads(); n != 1 {
			t.Fatalf("progress woke a channel that takes none: %d reads", n)
		}
		d.Published([]rollout.Published{{Key: k, Verdict: rollout.VerdictApplying, Progress: true}, {Key: k, Verdict: rollout.VerdictApplied}})
		if n := reads(); n != 2 {
			t.Fatalf("a verdict did not wake it: %d reads", n)
		}
	})
}
