// Package client is Warren's Go SDK: a typed client of the HTTP API in
// api/openapi.yaml. Errors carry the API's error code and wrap the matching
// sentinel, so errors.Is(err, client.ErrNotFound) works as on the server.
//
//	c, _ := client.FromEnv()
//	sb, _ := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
//	res, _ := c.Exec(ctx, sb.ID, api.ExecRequest{Command: "echo hi"})
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/warrenhq/warren/api"
)

// Sentinel errors, the same values the server wraps.
var (
	ErrInvalid      = api.ErrInvalid
	ErrUnauthorized = api.ErrUnauthorized
	ErrForbidden    = api.ErrForbidden
	ErrNotFound     = api.ErrNotFound
	ErrConflict     = api.ErrConflict
	ErrQuota        = api.ErrQuota
	ErrUnavailable  = api.ErrUnavailable
	ErrInternal     = api.ErrInternal
)

// DefaultURL is where a local warren server listens.
const DefaultURL = "http://127.0.0.1:7070"

// DefaultKeyFile is where a local server writes its admin key.
const DefaultKeyFile = "/var/lib/warren/admin.key"

// Error is an error answer of the API.
type Error struct {
	Status  int
	Code    string
	Message string
	// Quota says which quota refused a call (a 429), with the figures.
	Quota *api.QuotaExceeded
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel for e's code.
func (e *Error) Unwrap() error { return api.ErrorForCode(e.Code) }

// Client talks to one Warren server.
type Client struct {
	base string
	key  string
	hc   *http.Client
}

// New returns a client of the server at baseURL using key.
func New(baseURL, key string) *Client {
	return &Client{base: strings.TrimRight(baseURL, "/"), key: key, hc: &http.Client{}}
}

// FromEnv returns a client configured by WARREN_API_URL (default
// DefaultURL) and WARREN_API_KEY (default: the key in the file
// WARREN_KEY_FILE names, or in DefaultKeyFile, when readable), as the CLI
// and the Python SDK are.
func FromEnv() (*Client, error) {
	u := os.Getenv("WARREN_API_URL")
	if u == "" {
		u = DefaultURL
	}
	key := os.Getenv("WARREN_API_KEY")
	if key == "" {
		path := os.Getenv("WARREN_KEY_FILE")
		if path == "" {
			path = DefaultKeyFile
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("no API key: set WARREN_API_KEY, or run as a user who can read %s: %w", path, ErrUnauthorized)
		}
		key = strings.TrimSpace(string(b))
	}
	return New(u, key), nil
}

// BaseURL is the server's URL.
func (c *Client) BaseURL() string { return c.base }

func (c *Client) request(ctx context.Context, method, path string, q url.Values, body io.Reader, hdr http.Header) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("warren server at %s: %w (is `warren server` running?)", c.base, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var eb api.QuotaErrorBody
	if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message, Quota: eb.Error.Quota}
	}
	code := api.CodeInternal
	switch {
	case resp.StatusCode == 400:
		code = api.CodeInvalid
	case resp.StatusCode == 401:
		code = api.CodeUnauthorized
	case resp.StatusCode == 403:
		code = api.CodeForbidden
	case resp.StatusCode == 404:
		code = api.CodeNotFound
	case resp.StatusCode == 409:
		code = api.CodeConflict
	case resp.StatusCode == 429:
		code = api.CodeQuota
	case resp.StatusCode == 503:
		code = api.CodeUnavailable
	}
	return &Error{Status: resp.StatusCode, Code: code, Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(b)))}
}

func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	hdr := http.Header{}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		hdr.Set("Content-Type", "application/json")
	}
	resp, err := c.request(ctx, method, path, q, body, hdr)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding the answer of %s %s: %w", method, path, err)
	}
	return nil
}

// Health returns the server's health; it needs no key.
func (c *Client) Health(ctx context.Context) (api.Health, error) {
	var h api.Health
	return h, c.doJSON(ctx, http.MethodGet, "/healthz", nil, nil, &h)
}

// CreateSandbox creates a sandbox and returns once it answers commands.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.doJSON(ctx, http.MethodPost, "/v1/sandboxes", nil, req, &sb)
}

// GetSandbox returns a sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.doJSON(ctx, http.MethodGet, "/v1/sandboxes/"+url.PathEscape(id), nil, nil, &sb)
}

// ListOptions filter ListSandboxes.
type ListOptions struct {
	State    string
	Metadata map[string]string
}

// ListSandboxes lists the caller's sandboxes.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]api.Sandbox, error) {
	q := url.Values{}
	if opts.State != "" {
		q.Set("state", opts.State)
	}
	for k, v := range opts.Metadata {
		q.Set("metadata."+k, v)
	}
	var out api.SandboxList
	return out.Sandboxes, c.doJSON(ctx, http.MethodGet, "/v1/sandboxes", q, nil, &out)
}

// DeleteSandbox deletes a sandbox and everything it holds (volumes stay).
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/sandboxes/"+url.PathEscape(id), nil, nil, nil)
}

func sbPath(id, rest string) string { return "/v1/sandboxes/" + url.PathEscape(id) + rest }

// Exec runs a command to completion and returns its output.
func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest) (api.ExecResult, error) {
	var res api.ExecResult
	return res, c.doJSON(ctx, http.MethodPost, sbPath(id, "/exec"), nil, req, &res)
}

// ExecStream runs a command, calling fn with each output event as it
// arrives, and returns the exit code.
func (c *Client) ExecStream(ctx context.Context, id string, req api.ExecRequest, fn func(api.ExecEvent) error) (int, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return -1, err
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/x-ndjson"}}
	resp, err := c.request(ctx, http.MethodPost, sbPath(id, "/exec"), nil, bytes.NewReader(b), hdr)
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	code, ended := -1, false
	err = readLines(resp.Body, 8<<20, func(ev api.ExecEvent) (bool, error) {
		if ev.Error != "" {
			return true, fmt.Errorf("sandbox %s: exec: %s", id, ev.Error)
		}
		if err := fn(ev); err != nil {
			return true, err
		}
		if ev.ExitCode != nil {
			code, ended = *ev.ExitCode, true
			return true, nil
		}
		return false, nil
	})
	switch {
	case err != nil:
		return -1, fmt.Errorf("sandbox %s: exec stream: %w", id, err)
	case !ended:
		return -1, fmt.Errorf("sandbox %s: exec stream ended without an exit code: %w", id, ErrUnavailable)
	}
	return code, nil
}

// ReadFile opens a file of a sandbox for reading.
func (c *Client) ReadFile(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.request(ctx, http.MethodGet, sbPath(id, "/files"), url.Values{"path": {path}}, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile writes r to path in a sandbox, creating parent directories. A
// zero mode keeps the file's mode (0644 for a new file).
func (c *Client) WriteFile(ctx context.Context, id, path string, r io.Reader, mode os.FileMode) (api.FileEntry, error) {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode.Perm()), 8))
	}
	resp, err := c.request(ctx, http.MethodPut, sbPath(id, "/files"), q, r,
		http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return api.FileEntry{}, err
	}
	defer resp.Body.Close()
	var fe api.FileEntry
	return fe, json.NewDecoder(resp.Body).Decode(&fe)
}

// RemoveFile deletes a file, or a directory with recursive.
func (c *Client) RemoveFile(ctx context.Context, id, path string, recursive bool) error {
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.doJSON(ctx, http.MethodDelete, sbPath(id, "/files"), q, nil, nil)
}

// ListFiles lists a directory of a sandbox down to depth levels.
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) ([]api.FileEntry, error) {
	q := url.Values{"path": {path}, "depth": {strconv.Itoa(max(depth, 1))}}
	var out api.FileList
	return out.Entries, c.doJSON(ctx, http.MethodGet, sbPath(id, "/files/list"), q, nil, &out)
}

// StatFile describes one path of a sandbox.
func (c *Client) StatFile(ctx context.Context, id, path string) (api.FileEntry, error) {
	var fe api.FileEntry
	return fe, c.doJSON(ctx, http.MethodGet, sbPath(id, "/files/stat"), url.Values{"path": {path}}, nil, &fe)
}

// ListImages lists the images in the server's cache.
func (c *Client) ListImages(ctx context.Context) ([]api.Image, error) {
	var out api.ImageList
	return out.Images, c.doJSON(ctx, http.MethodGet, "/v1/images", nil, nil, &out)
}

// DeleteImage removes an image from the cache.
func (c *Client) DeleteImage(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/images/"+name, nil, nil, nil)
}

// PullOptions tune PullImage.
type PullOptions struct {
	// Name is the local name; the ref when empty.
	Name string
	// Insecure allows a registry over plain HTTP.
	Insecure bool
}

// PullImage pulls ref from a registry into the server's cache, calling
// progress (if not nil) as it goes.
func (c *Client) PullImage(ctx context.Context, ref string, opts PullOptions, progress func(api.Progress)) (api.Image, error) {
	b, _ := json.Marshal(api.PullRequest{Ref: ref, Name: opts.Name})
	q := url.Values{}
	if opts.Insecure {
		q.Set("insecure", "true")
	}
	return c.longOp(ctx, "/v1/images/pull", q, bytes.NewReader(b), "application/json", progress)
}

// ImportImage imports a `docker save` or OCI archive read from r.
func (c *Client) ImportImage(ctx context.Context, r io.Reader, name string, progress func(api.Progress)) (api.Image, error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	return c.longOp(ctx, "/v1/images/import", q, r, "application/x-tar", progress)
}

// BuildImage builds the built-in image (or finds it in the cache).
func (c *Client) BuildImage(ctx context.Context, progress func(api.Progress)) (api.Image, error) {
	return c.longOp(ctx, "/v1/images/build", nil, nil, "", progress)
}

// longOp posts to a long-running image call and follows its NDJSON
// progress to the end.
func (c *Client) longOp(ctx context.Context, path string, q url.Values, body io.Reader, contentType string, progress func(api.Progress)) (api.Image, error) {
	hdr := http.Header{"Accept": {"application/x-ndjson"}}
	if contentType != "" {
		hdr.Set("Content-Type", contentType)
	}
	resp, err := c.request(ctx, http.MethodPost, path, q, body, hdr)
	if err != nil {
		return api.Image{}, err
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		var img api.Image
		return img, json.NewDecoder(resp.Body).Decode(&img)
	}
	var img *api.Image
	err = readLines(resp.Body, 1<<20, func(p api.Progress) (bool, error) {
		switch {
		case p.Error != "":
			return true, errors.New(p.Error)
		case p.Done != nil:
			img = p.Done
			return true, nil
		case progress != nil:
			progress(p)
		}
		return false, nil
	})
	if err != nil {
		return api.Image{}, err
	}
	if img == nil {
		return api.Image{}, fmt.Errorf("%s: the server ended the stream without a result: %w", path, ErrUnavailable)
	}
	return *img, nil
}

// readLines decodes one JSON value per line of r and hands each to fn,
// until fn says it is done (or fails) or r ends.
func readLines[T any](r io.Reader, maxLine int, fn func(T) (done bool, err error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return fmt.Errorf("decoding a line of the stream: %w", err)
		}
		done, err := fn(v)
		if done || err != nil {
			return err
		}
	}
	return sc.Err()
}

// PauseSandbox freezes a sandbox; its memory is kept (and, after a while,
// stored to disk), and resume brings back every process as it was.
func (c *Client) PauseSandbox(ctx context.Context, id string) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.doJSON(ctx, http.MethodPost, sbPath(id, "/pause"), nil, nil, &sb)
}

// ResumeSandbox brings a paused sandbox back to running.
func (c *Client) ResumeSandbox(ctx context.Context, id string) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.doJSON(ctx, http.MethodPost, sbPath(id, "/resume"), nil, nil, &sb)
}

// SnapshotSandbox saves a running sandbox's memory, processes and disk
// while it keeps running.
func (c *Client) SnapshotSandbox(ctx context.Context, id, name string) (api.Snapshot, error) {
	var sn api.Snapshot
	return sn, c.doJSON(ctx, http.MethodPost, sbPath(id, "/snapshots"), nil, api.SnapshotRequest{Name: name}, &sn)
}

// RevertSandbox returns a sandbox to a snapshot, keeping its id.
func (c *Client) RevertSandbox(ctx context.Context, id, snapshot string) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.doJSON(ctx, http.MethodPost, sbPath(id, "/revert"), nil, api.RevertRequest{Snapshot: snapshot}, &sb)
}

// ForkSandbox snapshots a sandbox now and starts count copies of it.
func (c *Client) ForkSandbox(ctx context.Context, id string, count int) ([]api.Sandbox, error) {
	var out api.SandboxList
	return out.Sandboxes, c.doJSON(ctx, http.MethodPost, sbPath(id, "/fork"), nil, api.ForkRequest{Count: count}, &out)
}

// ForkSnapshot starts count sandboxes from a snapshot.
func (c *Client) ForkSnapshot(ctx context.Context, snapshot string, count int) ([]api.Sandbox, error) {
	var out api.SandboxList
	return out.Sandboxes, c.doJSON(ctx, http.MethodPost, "/v1/snapshots/"+url.PathEscape(snapshot)+"/fork", nil, api.ForkRequest{Count: count}, &out)
}

// ListSnapshots lists snapshots, of one sandbox when sandboxID is set.
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]api.Snapshot, error) {
	q := url.Values{}
	if sandboxID != "" {
		q.Set("sandbox", sandboxID)
	}
	var out api.SnapshotList
	return out.Snapshots, c.doJSON(ctx, http.MethodGet, "/v1/snapshots", q, nil, &out)
}

// GetSnapshot returns a snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (api.Snapshot, error) {
	var sn api.Snapshot
	return sn, c.doJSON(ctx, http.MethodGet, "/v1/snapshots/"+url.PathEscape(id), nil, nil, &sn)
}

// DeleteSnapshot deletes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil, nil, nil)
}
