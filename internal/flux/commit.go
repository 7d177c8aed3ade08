package flux

// How a commit is named, the one rule of it: by its hash, in hex, or a
// prefix of it no shorter than git's shortest abbreviation. Queries
// (ParseQuery), the commits releases name (NamedCommit, ChartCommit) and
// the lookups behind them all follow it.

// MinPrefix is the fewest hex digits that name a commit: git's shortest
// abbreviation, a pipeline's shortest query.
const MinPrefix = 7

// IsCommit reports whether s can name a commit: MinPrefix to 64 lowercase
// hex digits, a prefix of a sha1 or sha256 hash.
func IsCommit(s string) bool {
	if len(s) < MinPrefix || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
