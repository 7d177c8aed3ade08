// Package procstat reads the machine's accounting for the benchmark tools:
// on a virtual machine, the share of the CPUs its hypervisor took while
// they measured, which no design of the service can win back; and the
// memory of the service they measure.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Memory is process pid's resident set, its peak, and the part of it that
// is anonymous (the heap and stacks, which a memory limit can OOM-kill for)
// rather than file-backed (bbolt's mmap of its file: clean page cache the
// kernel reclaims under a limit), in MiB; zeros when it cannot be read.
func Memory(pid int) (rss, peak, anon float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		case "RssAnon:":
			anon = kb / 1024
		}
	}
	return rss, peak, anon
}

// CPU is the CPU time process pid has used so far, user and system; zero
// when it cannot be read.
func CPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command's name, in parentheses, may hold spaces: the fields
	// are counted after it (utime and stime are the 14th and 15th).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on Linux
// whatever the kernel's own tick.
const clockTicks = 100

// Ticks is the machine's CPU time so far, in clock ticks: all of it, and
// what the hypervisor stole. Zero where /proc/stat cannot be read.
type Ticks struct{ Total, Steal int64 }

// Read reads Ticks from /proc/stat.
func Read() Ticks {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return Ticks{}
	}
	return Parse(b)
}

// Parse reads Ticks from the text of /proc/stat: the first eight figures
// of its cpu line (user, nice, system, idle, iowait, irq, softirq, steal;
// guest time is counted in user time already).
func Parse(b []byte) Ticks {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return Ticks{}
	}
	var t Ticks
	for i, v := range f[1:9] {
		n, _ := strconv.ParseInt(v, 10, 64)
		t.Total += n
		if i == 7 {
			t.Steal = n
		}
	}
	return t
}

// Add sums two spans of Ticks.
func (t Ticks) Add(u Ticks) Ticks { return Ticks{t.Total + u.Total, t.Steal + u.Steal} }

// Since is the span from earlier to t.
func (t Ticks) Since(earlier Ticks) Ticks {
	return Ticks{t.Total - earlier.Total, t.Steal - earlier.Steal}
}

// Stolen is the share of a span's CPU time the hypervisor took: 0 for an
// empty span.
func (t Ticks) Stolen() float64 {
	if t.Total <= 0 {
		return 0
	}
	return float64(t.Steal) / float64(t.Total)
}
