// Package fsync holds what the store and the mail directory both need to
// make a rename durable.
package fsync

import "os"

// Dir syncs a directory, so that the renames and creations in it survive
// a crash.
func Dir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
