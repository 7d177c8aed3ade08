package flux

// How a commit is named, the one rule of it: by its hash, in hex, or a
// prefix of it no shorter than git's shortest abbreviation. Queries
// (ParseQuery), the commits releases name (NamedCommit, ChartCommit) and
// the lookups behind them all follow it.

// MinPrefix is the fewest hex digits that name a commit: git's shortest
// abbreviation, a pipeline's shortest query.
const MinPrefix = 7

// ShortDigits is how many hex digits a hash is shown with (git's short
// hash, in mails, pages and wait's output).
const ShortDigits = 7

// Short is hash as people read it.
func Short(hash string) string { return hash[:min(len(hash), ShortDigits)] }

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

// GitCommit is the git commit a rollout deployed, as far as Flux's words
// tell: an artifact's origin revision (the commit it was built from),
// else its own revision when a GitRepository produced it (sha1 or sha256
// object format) or when it is a sha1 one (git's: no artifact digest is);
// "" for an artifact's digest (an OCIRepository or a Bucket without
// origin), which no repository holds. sourceKind is the kind of the
// rollout's source, "" when unknown.
func GitCommit(revision, origin, sourceKind string) string {
	if o, err := ParseRevision(origin); err == nil {
		return o.Hash
	}
	if r, err := ParseRevision(revision); err == nil && (r.Algo == "sha1" || sourceKind == KindGitRepository) {
		return r.Hash
	}
	return ""
}
