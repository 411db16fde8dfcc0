package client

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFromEnv(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		url, key, file   string
		wantURL, wantKey string
	}{
		{"", "", keyFile, DefaultURL, "from-file"},
		{"http://h:1", "env", keyFile, "http://h:1", "env"},
	} {
		t.Setenv("WARREN_API_URL", tc.url)
		t.Setenv("WARREN_API_KEY", tc.key)
		t.Setenv("WARREN_KEY_FILE", tc.file)
		c, err := FromEnv()
		if err != nil {
			t.Fatalf("FromEnv with %+v: %v", tc, err)
		}
		if c.base != tc.wantURL || c.key != tc.wantKey {
			t.Errorf("FromEnv with %+v: got %s, %q; want %s, %q", tc, c.base, c.key, tc.wantURL, tc.wantKey)
		}
	}
	t.Setenv("WARREN_API_KEY", "")
	t.Setenv("WARREN_KEY_FILE", filepath.Join(t.TempDir(), "missing"))
	if _, err := FromEnv(); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("FromEnv with an unreadable key file: got %v, want ErrUnauthorized", err)
	}
}
