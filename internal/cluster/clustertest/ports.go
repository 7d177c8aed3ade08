package clustertest

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// ports hands out loopback TCP ports for the processes a test starts, each
// port once, from below the kernel's ephemeral range. A port taken from
// that range (listening on :0) can be taken again, while a process that
// must come back on it is down, by any outgoing connection: the
// controllers' watches on the apiserver, say. The service's restart then
// failed to bind, and another instance answered on its port.
type ports struct {
	mu           sync.Mutex
	next, lo, hi int
}

func newPorts() *ports {
	hi := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				hi = n
			}
		}
	}
	const lo = 10000
	// A random start: test binaries that run at the same time (go test
	// runs packages in parallel) rarely try the same ports.
	return &ports{next: lo + rand.IntN(hi-lo), lo: lo, hi: hi}
}

func (p *ports) take(t testing.TB) int {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for range p.hi - p.lo {
		port := p.next
		if p.next++; p.next >= p.hi {
			p.next = p.lo
		}
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			ln.Close()
			return port
		}
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return 0
}

// FreePort is a loopback TCP port free now, outside the ephemeral range,
// and handed out by this cluster only once.
func (c *Cluster) FreePort(t testing.TB) int { return c.ports.take(t) }
