package enginetest

import (
	"crypto/sha1"
	"encoding/hex"
	"sync"
	"time"
)

// Hash is a stable sha1 revision hash named by a label ("R1").
func Hash(label string) string {
	s := sha1.Sum([]byte(label))
	return hex.EncodeToString(s[:])
}

// Clock is a clock a test moves by hand.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock forward.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
