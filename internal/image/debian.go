package image

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/fsutil"
)

// The built-in image.
const (
	// BuiltinName is the name the built-in Debian image is registered under.
	BuiltinName = "debian:bookworm"
	// RecipeVersion changes whenever the recipe changes in a way its
	// package list and suite do not show (a new cleanup step, say).
	RecipeVersion = "1"
	// DefaultMirror is used when the machine names no Debian mirror.
	DefaultMirror = "http://deb.debian.org/debian"
	// DefaultCacheDir is where built images are kept, outside any checkout.
	DefaultCacheDir = "/var/cache/warren"
)

const (
	debianSuite   = "bookworm"
	debianVariant = "minbase"
)

// debianPackages are installed on top of debootstrap's minbase.
var debianPackages = []string{"python3", "bash", "coreutils", "git", "curl", "ca-certificates", "procps"}

// Debian builds the built-in Debian image with debootstrap.
type Debian struct {
	// Mirror is the Debian archive to install from. Empty means the mirror
	// this machine's apt sources use when they name one, else DefaultMirror.
	Mirror string
	// Debootstrap is the program to run; "debootstrap" from PATH when empty.
	Debootstrap string
}

// BuildDebian builds the built-in image (or finds it already built) under
// cacheDir and returns its unpacked tree and its digest. See Debian.Build.
func BuildDebian(ctx context.Context, cacheDir string, progress func(api.Progress)) (dir, digest string, err error) {
	return Debian{}.Build(ctx, cacheDir, progress)
}

// Recipe is the text that identifies what Build makes: the suite, the
// variant, the packages and RecipeVersion. The mirror is not part of it:
// any mirror serves the same packages.
func (Debian) Recipe() string {
	return fmt.Sprintf("debootstrap suite=%s variant=%s include=%s recipe=%s",
		debianSuite, debianVariant, strings.Join(debianPackages, ","), RecipeVersion)
}

// Digest is the content address of the built-in image: the sha256 of its
// recipe, so that it changes whenever the recipe does.
func (d Debian) Digest() string {
	sum := sha256.Sum256([]byte(d.Recipe()))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Build returns the built-in image's tree, cacheDir/debian-bookworm-<RecipeVersion>/rootfs,
// building it first unless a complete build is already there. The build
// runs in a temporary directory that is renamed into place once it has
// finished, and the "complete" marker beside rootfs is written last, so a
// half-built tree is never used. Builds of the same recipe are serialized
// by a lock file; debootstrap's output lines are sent to progress with phase
// "debootstrap".
func (d Debian) Build(ctx context.Context, cacheDir string, progress func(api.Progress)) (dir, digest string, err error) {
	if progress == nil {
		progress = func(api.Progress) {}
	}
	digest = d.Digest()
	base := "debian-" + debianSuite + "-" + RecipeVersion
	final := filepath.Join(cacheDir, base)
	dir = filepath.Join(final, "rootfs")
	if isComplete(final) {
		return dir, digest, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	unlock, err := lockFile(ctx, filepath.Join(cacheDir, base+".lock"))
	if err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	defer unlock()
	if isComplete(final) { // another process built it while we waited
		return dir, digest, nil
	}

	// Holding the lock, anything left by an earlier build is stale.
	stale, _ := filepath.Glob(filepath.Join(cacheDir, "."+base+"-*"))
	if _, err := os.Lstat(final); err == nil {
		stale = append(stale, final)
	}
	for _, p := range stale {
		if err := removeTree(p); err != nil {
			return "", "", fmt.Errorf("building %s: removing stale %s: %w", BuiltinName, p, err)
		}
	}

	mirror := d.Mirror
	if mirror == "" {
		mirror = SystemMirror()
	}
	tmp, err := os.MkdirTemp(cacheDir, "."+base+"-*")
	if err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, removeTree(tmp))
		}
	}()
	// MkdirTemp makes 0700; the tree itself is made by debootstrap.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	rootfs := filepath.Join(tmp, "rootfs")
	slog.InfoContext(ctx, "building built-in image", "image", BuiltinName, "mirror", mirror, "dir", rootfs)
	progress(api.Progress{Phase: "debootstrap", Message: fmt.Sprintf("building %s from %s (takes a few minutes)", BuiltinName, mirror)})
	if err := d.debootstrap(ctx, rootfs, mirror, progress); err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	progress(api.Progress{Phase: "clean", Message: "removing apt caches"})
	if err := cleanAptCaches(rootfs); err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	marker := fmt.Sprintf("%s\n%s\nmirror=%s\nbuilt=%s\n", d.Recipe(), digest, mirror, time.Now().UTC().Format(time.RFC3339))
	if err := writeFileSync(filepath.Join(tmp, "complete"), []byte(marker), 0o644); err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	if err := fsutil.SyncDir(cacheDir); err != nil {
		return "", "", fmt.Errorf("building %s: %w", BuiltinName, err)
	}
	return dir, digest, nil
}

func isComplete(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "complete"))
	return err == nil
}

func (d Debian) debootstrap(ctx context.Context, rootfs, mirror string, progress func(api.Progress)) error {
	prog := d.Debootstrap
	if prog == "" {
		prog = "debootstrap"
	}
	path, err := exec.LookPath(prog)
	if err != nil {
		return fmt.Errorf("%s is not installed (apt-get install debootstrap): %w", prog, err)
	}
	cmd := exec.CommandContext(ctx, path,
		"--variant="+debianVariant,
		"--include="+strings.Join(debianPackages, ","),
		debianSuite, rootfs, mirror)
	// debootstrap runs dpkg and friends; on cancel stop all of them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		return err
	}
	var tail []string
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			progress(api.Progress{Phase: "debootstrap", Message: line})
			if tail = append(tail, line); len(tail) > 10 {
				tail = tail[1:]
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err = cmd.Wait()
	pw.Close()
	<-scanned
	if err != nil {
		msg := strings.Join(tail, "\n")
		if log, rerr := os.ReadFile(filepath.Join(rootfs, "debootstrap", "debootstrap.log")); rerr == nil {
			msg += "\n" + lastLines(string(log), 20)
		}
		return fmt.Errorf("debootstrap %s from %s: %w\n%s", debianSuite, mirror, err, msg)
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cleanAptCaches removes downloaded packages and package lists, which apt
// fetches again when needed.
func cleanAptCaches(rootfs string) error {
	for _, pattern := range []string{"var/cache/apt/archives/*.deb", "var/lib/apt/lists/*", "var/cache/apt/*.bin"} {
		matches, err := filepath.Glob(filepath.Join(rootfs, pattern))
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := os.RemoveAll(m); err != nil {
				return err
			}
		}
	}
	return nil
}

// removeTree unmounts whatever is mounted under dir (debootstrap bind-mounts
// /dev entries and mounts /proc and /sys in its target, and leaves them when
// it is killed) and then removes dir. Removing first would reach through a
// bind mount into the host's /dev.
func removeTree(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}

func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	var points []string
	for line := range strings.SplitSeq(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == abs || strings.HasPrefix(mp, abs+"/") {
			points = append(points, mp)
		}
	}
	// Innermost first: later mounts are listed later.
	for i := len(points) - 1; i >= 0; i-- {
		if err := syscall.Unmount(points[i], syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("unmounting %s: %w", points[i], err)
		}
	}
	return nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// SystemMirror returns the Debian mirror this machine's apt sources use
// (/etc/apt/sources.list and /etc/apt/sources.list.d), or DefaultMirror
// when they name none.
func SystemMirror() string {
	return systemMirror("/etc/apt")
}

func systemMirror(aptDir string) string {
	files := []string{filepath.Join(aptDir, "sources.list")}
	for _, pattern := range []string{"*.list", "*.sources"} {
		m, _ := filepath.Glob(filepath.Join(aptDir, "sources.list.d", pattern))
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var uris []string
		if strings.HasSuffix(f, ".sources") {
			uris = deb822Mirrors(string(data))
		} else {
			uris = oneLineMirrors(string(data))
		}
		if len(uris) > 0 {
			return uris[0]
		}
	}
	return DefaultMirror
}

// debianSuites are the suite names that mark a source as a Debian archive
// (not security, not updates, not a third-party repository).
var debianSuites = map[string]bool{
	"bookworm": true, "trixie": true, "bullseye": true, "forky": true, "sid": true,
	"stable": true, "testing": true, "unstable": true, "oldstable": true,
}

func isMirrorURI(uri string) bool {
	return strings.HasPrefix(uri, "http://") || strings.HasPrefix(uri, "https://")
}

// oneLineMirrors reads "deb [options] URI suite components..." lines.
func oneLineMirrors(text string) []string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") {
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) > 0 {
				fields = fields[1:]
			}
		}
		if len(fields) >= 2 && isMirrorURI(fields[0]) && debianSuites[fields[1]] {
			out = append(out, strings.TrimRight(fields[0], "/"))
		}
	}
	return out
}

// deb822Mirrors reads deb822 stanzas (Types:, URIs:, Suites:, Enabled:).
func deb822Mirrors(text string) []string {
	var out []string
	for stanza := range strings.SplitSeq(strings.ReplaceAll(text, "\r\n", "\n"), "\n\n") {
		fields := map[string]string{}
		for line := range strings.SplitSeq(stanza, "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok || strings.HasPrefix(line, " ") {
				continue
			}
			fields[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
		if !strings.Contains(" "+fields["types"]+" ", " deb ") || strings.EqualFold(fields["enabled"], "no") {
			continue
		}
		debian := false
		for _, s := range strings.Fields(fields["suites"]) {
			debian = debian || debianSuites[s]
		}
		if !debian {
			continue
		}
		for _, u := range strings.Fields(fields["uris"]) {
			if isMirrorURI(u) {
				out = append(out, strings.TrimRight(u, "/"))
			}
		}
	}
	return out
}
