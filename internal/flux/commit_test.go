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

// TestGitCommit: which git commit a rollout deployed, one rule for the
// forge and wait's ancestry.
func TestGitCommit(t *testing.T) {
	sha1, sha256 := strings.Repeat("a", 40), strings.Repeat("b", 64)
	for _, tt := range []struct{ revision, origin, kind, want string }{
		{"main@sha1:" + sha1, "", "", sha1},
		{"main@sha256:" + sha256, "", KindGitRepository, sha256}, // a repository in sha256 object format
		{"latest@sha256:" + sha256, "main@sha1:" + sha1, KindOCIRepository, sha1},
		{"latest@sha256:" + sha256, "", KindOCIRepository, ""},
		{"sha256:" + sha256, "", KindBucket, ""},
		{"sha256:" + sha256, "", "", ""}, // unknown source: a digest, not a commit
	} {
		if got := GitCommit(tt.revision, tt.origin, tt.kind); got != tt.want {
			t.Errorf("GitCommit(%s, %s, %s) = %q, want %q", tt.revision, tt.origin, tt.kind, got, tt.want)
		}
	}
}
