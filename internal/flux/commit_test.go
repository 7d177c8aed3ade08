package flux

import (
	"strings"
	"testing"
)

// TestIsCommit: the one rule of a commit's name, which queries and the
// commits releases name follow.
func TestIsCommit(t *testing.T) {
	for s, want := range map[string]bool{
		"abcdef1": true, strings.Repeat("a", 40): true, strings.Repeat("0", 64): true,
		"abcdef": false, "ABCDEF1": false, "abcdefg": false, strings.Repeat("a", 65): false, "": false,
	} {
		if got := IsCommit(s); got != want {
			t.Errorf("IsCommit(%q) = %v, want %v", s, got, want)
		}
	}
	if _, _, err := ParseQuery(strings.Repeat("a", MinPrefix-1)); err == nil {
		t.Errorf("a query shorter than MinPrefix is taken")
	}
}
