package store

// OpenCompactingAbove is Open with a smaller file size above which a mostly
// free file is compacted.
func OpenCompactingAbove(dir string, n int64) (*DB, error) { return openDB(dir, n) }

// Record encodings, for the golden round trip.
var (
	EncodeSettled = encodeSettled
	DecodeSettled = decodeSettled
	EncodeKey     = encodeKey
	DecodeKey     = decodeKey
)
