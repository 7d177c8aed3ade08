package mail

// SetDirSync replaces how d syncs its directory after a burst.
func (d *Dir) SetDirSync(f func(dir string) error) { d.syncDir = f }
