package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/api"
)

func writeFiles(files map[string]string) func(string) error {
	return func(dir string) error {
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestCreateAndCheck(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Create(t.Context(), "sn-abc", Manifest{SandboxID: "sb-x", RunscBuild: "b1", Platform: "systrap"},
		writeFiles(map[string]string{"pages.img": "0123456789", "checkpoint.img": "abc"}))
	if err != nil {
		t.Fatal(err)
	}
	if m.SizeBytes != 13 || len(m.Files) != 2 || m.Files[0].Name != "checkpoint.img" {
		t.Errorf("manifest: got %+v, want 2 files sorted by name, 13 bytes", m)
	}
	if !s.Exists("sn-abc") {
		t.Fatalf("Exists: got false after Create")
	}
	if _, err := s.Check("sn-abc", "b1", "systrap", true); err != nil {
		t.Errorf("Check of a whole image: %v", err)
	}
	for _, tc := range []struct {
		name, build, platform string
		damage                func()
		says                  string
	}{
		{"other build", "b2", "systrap", nil, "cannot restore"},
		{"other platform", "b1", "kvm", nil, "cannot restore"},
		{"truncated", "b1", "systrap", func() { os.Truncate(filepath.Join(s.Path("sn-abc"), "pages.img"), 3) }, "damaged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.damage != nil {
				tc.damage()
			}
			_, err := s.Check("sn-abc", tc.build, tc.platform, false)
			if !errors.Is(err, api.ErrConflict) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %v, want a conflict saying %q", err, tc.says)
			}
		})
	}
}

func TestChecksumMismatch(t *testing.T) {
	s, _ := Open(t.TempDir())
	if _, err := s.Create(t.Context(), "sn-sum", Manifest{RunscBuild: "b", Platform: "p"}, writeFiles(map[string]string{"a": "hello"})); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(s.Path("sn-sum"), "a"), []byte("jello"), 0o600)
	if _, err := s.Check("sn-sum", "b", "p", false); err != nil {
		t.Errorf("a size-only check: got %v, want nil (sizes match)", err)
	}
	if _, err := s.Check("sn-sum", "b", "p", true); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("a full check: got %v, want a checksum mismatch", err)
	}
}

func TestFailedCreateLeavesNothing(t *testing.T) {
	root := t.TempDir()
	s, _ := Open(root)
	_, err := s.Create(t.Context(), "sn-fail", Manifest{}, func(dir string) error {
		os.WriteFile(filepath.Join(dir, "half.img"), []byte("x"), 0o600)
		return errors.New("disk full")
	})
	if err == nil || s.Exists("sn-fail") {
		t.Fatalf("got %v, exists %v; want the error and no image", err, s.Exists("sn-fail"))
	}
	if entries, _ := os.ReadDir(filepath.Join(root, ".tmp")); len(entries) != 0 {
		t.Errorf("temporary files left: %d", len(entries))
	}
	if ids, _ := s.IDs(); len(ids) != 0 {
		t.Errorf("IDs after a failed create: got %v, want none", ids)
	}
}

func TestOpenRemovesInterruptedWrites(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, ".tmp", "sn-half"), 0o700)
	os.WriteFile(filepath.Join(root, ".tmp", "sn-half", "pages.img"), []byte("x"), 0o600)
	s, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, ".tmp")); len(entries) != 0 {
		t.Errorf("Open left %d interrupted writes", len(entries))
	}
	if s.Exists("sn-half") {
		t.Errorf("an interrupted write counts as an image")
	}
}

func TestDeleteAndBadIDs(t *testing.T) {
	s, _ := Open(t.TempDir())
	s.Create(t.Context(), "sn-del", Manifest{}, writeFiles(map[string]string{"a": "b"}))
	if err := s.Delete("sn-del"); err != nil || s.Exists("sn-del") {
		t.Errorf("Delete: %v, exists %v", err, s.Exists("sn-del"))
	}
	if err := s.Delete("sn-del"); err != nil {
		t.Errorf("deleting a missing image: got %v, want nil", err)
	}
	for _, id := range []string{"", "../x", "sn-/../../etc", "SN-ABC"} {
		if _, err := s.Create(t.Context(), id, Manifest{}, writeFiles(nil)); !errors.Is(err, api.ErrInvalid) {
			t.Errorf("Create(%q): got %v, want invalid", id, err)
		}
	}
	if _, err := s.Manifest("sn-none"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("Manifest of a missing image: got %v, want not found", err)
	}
}

// DeleteLater takes the image out of the store at once, even when the same
// id is made and dropped again before the first removal has finished.
func TestDeleteLater(t *testing.T) {
	root := t.TempDir()
	s, _ := Open(root)
	for i := range 3 {
		if _, err := s.Create(t.Context(), "ps-again", Manifest{}, writeFiles(map[string]string{"pages.img": strings.Repeat("x", 1<<20)})); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := s.DeleteLater("ps-again"); err != nil {
			t.Fatalf("round %d: DeleteLater: %v", i, err)
		}
		if s.Exists("ps-again") {
			t.Fatalf("round %d: the image is still in the store after DeleteLater", i)
		}
	}
	if err := s.DeleteLater("ps-again"); err != nil {
		t.Errorf("dropping a missing image: got %v, want nil", err)
	}
	if err := s.DeleteLater("../x"); !errors.Is(err, api.ErrInvalid) {
		t.Errorf("DeleteLater(../x): got %v, want invalid", err)
	}
	// What the background removal has not reached yet goes at the next Open.
	if _, err := Open(root); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, ".tmp")); len(entries) != 0 {
		t.Errorf("Open left %d entries in .tmp", len(entries))
	}
}
