// Package fsutil holds the few file-system steps that durable writes share.
package fsutil

import "os"

// SyncDir fsyncs a directory, so that the creations, renames and removals
// of entries in it survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
