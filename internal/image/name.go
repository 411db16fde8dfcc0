package image

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/warrenhq/warren/api"
)

// Local image names follow the docker reference grammar:
// [host[:port]/]path[:tag][@sha256:hex], such as debian:bookworm,
// localhost:5000/foo/bar:v1 or python:3.12.
var (
	domainRe    = regexp.MustCompile(`^(?:localhost|[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*)(?::[0-9]{1,5})?$`)
	componentRe = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$`)
	tagRe       = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestRe    = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

const maxNameLen = 200

// NormalizeName checks an image name and returns its canonical local form:
// a missing tag becomes ":latest", and Docker Hub's implicit prefixes
// (docker.io/library/) are dropped, so "docker.io/library/python" and
// "python:latest" name the same local image. Errors wrap api.ErrInvalid.
func NormalizeName(name string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("image name %q: %s (want a name like debian:bookworm or localhost:5000/team/tool:v1): %w", name, why, api.ErrInvalid)
	}
	if name == "" {
		return "", bad("empty")
	}
	if len(name) > maxNameLen {
		return "", bad(fmt.Sprintf("longer than %d characters", maxNameLen))
	}
	rest, digest, hasDigest := strings.Cut(name, "@")
	if hasDigest && !digestRe.MatchString(digest) {
		return "", bad("the digest is not sha256:<64 hex digits>")
	}
	// A tag follows the last colon after the last slash.
	repo, tag := rest, ""
	if i := strings.LastIndexByte(rest, ':'); i > strings.LastIndexByte(rest, '/') {
		repo, tag = rest[:i], rest[i+1:]
		if !tagRe.MatchString(tag) {
			return "", bad(fmt.Sprintf("tag %q has characters other than letters, digits, '_', '.' and '-'", tag))
		}
	}
	parts := strings.Split(repo, "/")
	path := parts
	if len(parts) > 1 && (strings.ContainsAny(parts[0], ".:") || parts[0] == "localhost") {
		if !domainRe.MatchString(parts[0]) {
			return "", bad(fmt.Sprintf("registry %q is not a host name with an optional port", parts[0]))
		}
		path = parts[1:]
		switch parts[0] {
		case "docker.io", "index.docker.io", "registry-1.docker.io":
			if len(path) > 1 && path[0] == "library" {
				path = path[1:]
			}
			parts = path
		}
	}
	for _, c := range path {
		if !componentRe.MatchString(c) {
			return "", bad(fmt.Sprintf("%q must be lower-case letters and digits, separated by '.', '_' or '-'", c))
		}
	}
	out := strings.Join(parts, "/")
	if tag == "" && !hasDigest {
		tag = "latest"
	}
	if tag != "" {
		out += ":" + tag
	}
	if hasDigest {
		out += "@" + digest
	}
	return out, nil
}

// escapeName turns a normalized name into a file name: bytes other than
// letters, digits, '.', '_' and '-' become %XX, so "localhost:5000/a:v1"
// is stored as "localhost%3A5000%2Fa%3Av1". It cannot make "." or "..",
// since normalized names start with a letter or digit.
func escapeName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}
