package sandbox

import (
	"context"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/warrenhq/warren/internal/store"
)

// StorageUse is the disk that one sandbox holds: its directory (writable
// layer, bundle, logs), its stored pause image, and its snapshots (which
// outlive it: a deleted sandbox's snapshots still count under its id). A
// volume is an entry of its own, under the volume's id (vol-...), its size
// allocated in full.
type StorageUse struct {
	TeamID    string
	SandboxID string
	Bytes     int64
}

// StorageUse measures what every sandbox holds on disk now. Sandboxes
// waiting in a warm pool are nobody's yet and are left out.
func (m *Manager) StorageUse(ctx context.Context) ([]StorageUse, error) {
	all, err := m.store.ListSandboxes(ctx, store.Filter{})
	if err != nil {
		return nil, err
	}
	type key struct{ team, id string }
	sizes := map[key]int64{}
	var order []key
	add := func(k key, n int64) {
		if _, ok := sizes[k]; !ok {
			order = append(order, k)
		}
		sizes[k] += n
	}
	for _, sb := range all {
		if sb.Pool != "" {
			continue
		}
		n := diskUsage(m.dir(sb.ID))
		if sb.Stored {
			n += diskUsage(m.snaps.Path(pauseImageID(sb.ID)))
		}
		add(key{sb.TeamID, sb.ID}, n)
	}
	snaps, err := m.store.ListSnapshots(ctx, store.SnapshotFilter{})
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		add(key{sn.TeamID, sn.SandboxID}, sn.SizeBytes)
	}
	vols, err := m.store.ListVolumes(ctx, "")
	if err != nil {
		return nil, err
	}
	for _, v := range vols {
		add(key{v.TeamID, v.ID}, v.SizeMB<<20)
	}
	out := make([]StorageUse, 0, len(order))
	for _, k := range order {
		out = append(out, StorageUse{TeamID: k.team, SandboxID: k.id, Bytes: sizes[k]})
	}
	return out, nil
}

// diskUsage is the space the files under dir take on disk (allocated
// blocks, so a sparse writable layer counts what it holds, not its size).
// Files that vanish while it walks are skipped.
func diskUsage(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			n += st.Blocks * 512
		} else {
			n += fi.Size()
		}
		return nil
	})
	return n
}
