package procstat

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestParse: the machine's ticks are the first eight figures of the cpu
// line, steal the eighth; a text without the line gives zeros.
func TestParse(t *testing.T) {
	stat := "cpu  2391140 236505 594131 2510845 151367 0 134374 543743 10 20\ncpu0 1199737 117600 296618 1247878 96178 0 50693 274884 0 0\n"
	want := Ticks{Total: 2391140 + 236505 + 594131 + 2510845 + 151367 + 0 + 134374 + 543743, Steal: 543743}
	if got := Parse([]byte(stat)); got != want {
		t.Errorf("Parse = %+v, want %+v", got, want)
	}
	if got := Parse([]byte("intr 1 2 3\n")); got != (Ticks{}) {
		t.Errorf("no cpu line: %+v, want zeros", got)
	}
	if got := Parse([]byte("cpu 1 2 3\n")); got != (Ticks{}) {
		t.Errorf("a short cpu line: %+v, want zeros", got)
	}
}

// TestSpans: a span is the difference of two readings, spans add up, and
// the stolen share is steal over total, 0 for an empty span.
func TestSpans(t *testing.T) {
	a, b := Ticks{Total: 1000, Steal: 100}, Ticks{Total: 1400, Steal: 200}
	span := b.Since(a)
	if span != (Ticks{400, 100}) {
		t.Errorf("b.Since(a) = %+v, want {400 100}", span)
	}
	if got := span.Add(Ticks{600, 0}); got != (Ticks{1000, 100}) || got.Stolen() != 0.1 {
		t.Errorf("sum %+v, stolen %v; want {1000 100}, 0.1", got, got.Stolen())
	}
	if s := (Ticks{}).Stolen(); s != 0 {
		t.Errorf("empty span: stolen %v, want 0", s)
	}
}

// TestRead: on this machine the reading is positive, steal within it, and
// time does not run backwards.
func TestRead(t *testing.T) {
	a := Read()
	if a.Total <= 0 || a.Steal < 0 || a.Steal > a.Total {
		t.Fatalf("Read = %+v: want total > 0 and 0 <= steal <= total", a)
	}
	if b := Read(); b.Total < a.Total || b.Steal < a.Steal {
		t.Errorf("second reading %+v before the first %+v", b, a)
	}
}

// TestMemory: this process has a resident set, its anonymous part within
// it, and a peak no lower; a process that does not exist has zeros.
func TestMemory(t *testing.T) {
	rss, peak, anon := Memory(os.Getpid())
	if rss <= 0 || peak < rss || anon <= 0 || anon > rss {
		t.Fatalf("this process: rss %.1f, peak %.1f, anon %.1f MiB", rss, peak, anon)
	}
	if rss, peak, anon := Memory(-1); rss != 0 || peak != 0 || anon != 0 {
		t.Fatalf("no such process: %.1f %.1f %.1f", rss, peak, anon)
	}
}

// TestCPU: this process's CPU time agrees with getrusage's, and grows as
// it computes; a process that does not exist has none.
func TestCPU(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before := CPU(os.Getpid())
	for deadline := time.Now().Add(10 * time.Second); CPU(os.Getpid()) < before+200*time.Millisecond; {
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %s while computing for 10 s", CPU(os.Getpid()))
		}
	}
	if got, want := CPU(os.Getpid()), rusage(); got < want-50*time.Millisecond || got > want+50*time.Millisecond {
		t.Fatalf("CPU %s, getrusage %s", got, want)
	}
	if CPU(-1) != 0 {
		t.Fatal("a process that does not exist used CPU time")
	}
}
