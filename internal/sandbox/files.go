package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// writeSpec writes spec as bundle/config.json: temp file, fsync, rename,
// fsync the directory.
func writeSpec(bundle string, spec *specs.Spec) error {
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(bundle, "config.json"), b, 0o600)
}

// WriteFileAtomic replaces path with data so that a reader, or a crash,
// sees either the old file or the whole new one.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

// ToAPI is the API's view of a sandbox row.
func ToAPI(sb store.Sandbox) api.Sandbox {
	vols := sb.Volumes
	if vols == nil {
		vols = []api.VolumeMount{}
	}
	meta := sb.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	return api.Sandbox{
		ID: sb.ID, Name: sb.Name, State: sb.State, Error: sb.Error, Image: sb.Image,
		Template: sb.Template, FromSnapshot: sb.FromSnapshot, CreatedAt: sb.CreatedAt,
		CPUs: sb.CPUs, MemoryMB: sb.MemoryMB, DiskMB: sb.DiskMB, Env: sb.Env, Network: sb.Network,
		Volumes: vols, Idle: sb.Idle, CheckpointIntervalS: sb.CheckpointIntervalS,
		LastCheckpointAt: sb.LastCheckpointAt, Metadata: meta,
	}
}
