package engine

import (
	"fmt"
	"testing"
	"time"
)

// TestUntilSettle: a settle pass that ran out of time goes on soon, unless
// its commit failed (the state was restored from the store): then not
// before the usual interval, so a failing store is not retried every
// settleSoon.
func TestUntilSettle(t *testing.T) {
	for _, tt := range []struct {
		more bool
		err  error
		want time.Duration
	}{
		{false, nil, settleEvery},
		{true, nil, settleSoon},
		{true, fmt.Errorf("%w: disk full", ErrStore), settleEvery},
		{false, fmt.Errorf("%w: disk full", ErrStore), settleEvery},
	} {
		e := &Engine{}
		e.settleMore.Store(tt.more)
		if got := e.untilSettle(tt.err); got != tt.want {
			t.Errorf("ran out of time %v, commit %v: next pass in %v, want %v", tt.more, tt.err, got, tt.want)
		}
	}
}
