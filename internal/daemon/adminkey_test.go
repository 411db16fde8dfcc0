package daemon

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warrenhq/warren/internal/server"
	"github.com/warrenhq/warren/internal/store"
)

// TestAdminKeyRotates checks the admin key is made once, kept across
// restarts, and that deleting admin.key makes a new one and revokes the old.
func TestAdminKeyRotates(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(t.Context(), filepath.Join(dir, "warren.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(dir, "admin.key")
	read := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	valid := func(key string) bool {
		_, err := st.KeyByHash(t.Context(), server.HashKey(key))
		return err == nil
	}
	if err := ensureAdminKey(t.Context(), st, path, log); err != nil {
		t.Fatal(err)
	}
	first := read()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 || !valid(first) {
		t.Fatalf("first key: mode %v, valid %v; want 0600 and valid", fi.Mode().Perm(), valid(first))
	}
	if err := ensureAdminKey(t.Context(), st, path, log); err != nil {
		t.Fatal(err)
	}
	if read() != first {
		t.Errorf("a restart changed the admin key")
	}
	os.Remove(path)
	if err := ensureAdminKey(t.Context(), st, path, log); err != nil {
		t.Fatal(err)
	}
	second := read()
	if second == first || !valid(second) || valid(first) {
		t.Errorf("after deleting admin.key: new key valid %v, old key valid %v; want a new valid key and the old one revoked", valid(second), valid(first))
	}
}
