package client

import (
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

	"github.com/coder/websocket"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/archive"
)

// This file is the SDK of what runs inside a sandbox: named shells,
// background jobs, code contexts, the terminal and archives.
//
//	c.CreateShell(ctx, id, api.CreateShellRequest{Name: "main"})
//	c.Exec(ctx, id, api.ExecRequest{Shell: "main", Command: "cd /work && make"})
//	job, _ := c.StartJob(ctx, id, api.ExecRequest{Command: "python3 train.py"})
//	out, _, _ := c.JobOutput(ctx, id, job.ID, client.OutputOptions{Follow: true})
//	res, _ := c.RunCode(ctx, id, api.CodeRequest{Code: "x = 1\nx + 1"})

// CreateShell starts a named shell in a sandbox.
func (c *Client) CreateShell(ctx context.Context, id string, req api.CreateShellRequest) (api.Shell, error) {
	var sh api.Shell
	return sh, c.doJSON(ctx, http.MethodPost, sbPath(id, "/shells"), nil, req, &sh)
}

// ListShells lists a sandbox's named shells.
func (c *Client) ListShells(ctx context.Context, id string) ([]api.Shell, error) {
	var out api.ShellList
	return out.Shells, c.doJSON(ctx, http.MethodGet, sbPath(id, "/shells"), nil, nil, &out)
}

// DeleteShell kills a named shell and what runs in it.
func (c *Client) DeleteShell(ctx context.Context, id, name string) error {
	return c.doJSON(ctx, http.MethodDelete, sbPath(id, "/shells/"+url.PathEscape(name)), nil, nil, nil)
}

// StartJob starts a background job (req.Background is set for you) and
// returns it at once.
func (c *Client) StartJob(ctx context.Context, id string, req api.ExecRequest) (api.Job, error) {
	req.Background = true
	var j api.Job
	return j, c.doJSON(ctx, http.MethodPost, sbPath(id, "/exec"), nil, req, &j)
}

// ListJobs lists a sandbox's background jobs, oldest first.
func (c *Client) ListJobs(ctx context.Context, id string) ([]api.Job, error) {
	var out api.JobList
	return out.Jobs, c.doJSON(ctx, http.MethodGet, sbPath(id, "/jobs"), nil, nil, &out)
}

// GetJob returns one background job.
func (c *Client) GetJob(ctx context.Context, id, job string) (api.Job, error) {
	var j api.Job
	return j, c.doJSON(ctx, http.MethodGet, jobPath(id, job, ""), nil, nil, &j)
}

// DeleteJob forgets an ended job and removes its output.
func (c *Client) DeleteJob(ctx context.Context, id, job string) error {
	return c.doJSON(ctx, http.MethodDelete, jobPath(id, job, ""), nil, nil, nil)
}

func jobPath(id, job, rest string) string { return sbPath(id, "/jobs/"+url.PathEscape(job)+rest) }

// OutputOptions choose what JobOutput reads.
type OutputOptions struct {
	// Stream is "stdout" (the default) or "stderr".
	Stream string
	// Offset is where to start, in bytes from the start of the stream.
	Offset int64
	// Follow keeps the reader open, reading output as it comes, until the
	// job ends.
	Follow bool
}

// JobOutput reads a job's output: the raw bytes, binary intact. It returns
// the reader and the offset its first byte is at, which is later than
// opts.Offset when older output was dropped (see api.Job). Close the reader.
func (c *Client) JobOutput(ctx context.Context, id, job string, opts OutputOptions) (io.ReadCloser, int64, error) {
	q := url.Values{}
	if opts.Stream != "" {
		q.Set("stream", opts.Stream)
	}
	if opts.Offset != 0 {
		q.Set("offset", strconv.FormatInt(opts.Offset, 10))
	}
	if opts.Follow {
		q.Set("follow", "true")
	}
	resp, err := c.request(ctx, http.MethodGet, jobPath(id, job, "/output"), q, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	from, _ := strconv.ParseInt(resp.Header.Get(api.HeaderOffset), 10, 64)
	return resp.Body, from, nil
}

// KillJob sends a signal ("TERM", "KILL", "9"; SIGTERM when empty) to a
// job and everything it started.
func (c *Client) KillJob(ctx context.Context, id, job, signal string) (api.Job, error) {
	var j api.Job
	return j, c.doJSON(ctx, http.MethodPost, jobPath(id, job, "/kill"), nil, api.KillRequest{Signal: signal}, &j)
}

// WriteJobStdin writes r to a job's stdin, then closes it if closeStdin.
func (c *Client) WriteJobStdin(ctx context.Context, id, job string, r io.Reader, closeStdin bool) (api.Job, error) {
	q := url.Values{}
	if closeStdin {
		q.Set("close", "true")
	}
	if r == nil {
		r = strings.NewReader("")
	}
	resp, err := c.request(ctx, http.MethodPost, jobPath(id, job, "/stdin"), q, r,
		http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return api.Job{}, err
	}
	defer resp.Body.Close()
	var j api.Job
	return j, json.NewDecoder(resp.Body).Decode(&j)
}

// RunCode runs code in a code context (the default one when req.Context is
// empty). An exception in the code is res.Error, not an error.
func (c *Client) RunCode(ctx context.Context, id string, req api.CodeRequest) (api.CodeResult, error) {
	var res api.CodeResult
	return res, c.doJSON(ctx, http.MethodPost, sbPath(id, "/code"), nil, req, &res)
}

// CreateContext starts a code context.
func (c *Client) CreateContext(ctx context.Context, id string, req api.CreateContextRequest) (api.CodeContext, error) {
	var cc api.CodeContext
	return cc, c.doJSON(ctx, http.MethodPost, sbPath(id, "/code/contexts"), nil, req, &cc)
}

// ListContexts lists a sandbox's code contexts.
func (c *Client) ListContexts(ctx context.Context, id string) ([]api.CodeContext, error) {
	var out api.ContextList
	return out.Contexts, c.doJSON(ctx, http.MethodGet, sbPath(id, "/code/contexts"), nil, nil, &out)
}

// DeleteContext ends a code context.
func (c *Client) DeleteContext(ctx context.Context, id, name string) error {
	return c.doJSON(ctx, http.MethodDelete, sbPath(id, "/code/contexts/"+url.PathEscape(name)), nil, nil, nil)
}

// RestartContext gives a code context a fresh interpreter: its state is
// gone.
func (c *Client) RestartContext(ctx context.Context, id, name string) (api.CodeContext, error) {
	var cc api.CodeContext
	return cc, c.doJSON(ctx, http.MethodPost, sbPath(id, "/code/contexts/"+url.PathEscape(name)+"/restart"), nil, nil, &cc)
}

// ReadArchive returns a tar of the directory at path in a sandbox. Close
// the reader; one that ends before the tar does means the read failed.
func (c *Client) ReadArchive(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.request(ctx, http.MethodGet, sbPath(id, "/files/archive"), url.Values{"path": {path}}, nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteArchive extracts the tar read from r into the directory at path in
// a sandbox, creating it.
func (c *Client) WriteArchive(ctx context.Context, id, path string, r io.Reader) (api.ArchiveResult, error) {
	resp, err := c.request(ctx, http.MethodPut, sbPath(id, "/files/archive"), url.Values{"path": {path}}, r,
		http.Header{"Content-Type": {"application/x-tar"}})
	if err != nil {
		return api.ArchiveResult{}, err
	}
	defer resp.Body.Close()
	var res api.ArchiveResult
	return res, json.NewDecoder(resp.Body).Decode(&res)
}

// UploadDir copies the local directory localDir into remoteDir in a
// sandbox (created if missing; files there of the same names are replaced).
func (c *Client) UploadDir(ctx context.Context, id, localDir, remoteDir string) (api.ArchiveResult, error) {
	fi, err := os.Stat(localDir)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	if !fi.IsDir() {
		return api.ArchiveResult{}, fmt.Errorf("%s is not a directory", localDir)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(archive.Write(pw, localDir)) }()
	res, err := c.WriteArchive(ctx, id, remoteDir, pr)
	pr.CloseWithError(errors.New("upload ended"))
	return res, err
}

// DownloadDir copies the directory remoteDir of a sandbox into localDir
// (created if missing; files there of the same names are replaced).
func (c *Client) DownloadDir(ctx context.Context, id, remoteDir, localDir string) (api.ArchiveResult, error) {
	rc, err := c.ReadArchive(ctx, id, remoteDir)
	if err != nil {
		return api.ArchiveResult{}, err
	}
	defer rc.Close()
	if err := os.MkdirAll(localDir, 0o755); err != nil {
		return api.ArchiveResult{}, err
	}
	st, err := archive.Extract(rc, localDir)
	if err != nil {
		return api.ArchiveResult{}, fmt.Errorf("copying %s:%s to %s: %w", id, remoteDir, localDir, err)
	}
	return api.ArchiveResult{Path: localDir, Entries: st.Entries, Bytes: st.Bytes}, nil
}

// Terminal is an interactive shell on a pseudo-terminal in a sandbox, over
// a WebSocket (GET /v1/sandboxes/{id}/pty). Read gives what the terminal
// shows, Write types; Read ends with io.EOF once the shell has exited, and
// ExitCode then says how.
type Terminal struct {
	conn    *websocket.Conn
	ctx     context.Context
	pending []byte
	exit    *int
}

// OpenTerminal starts an interactive login shell in a sandbox on a
// terminal of cols x rows (80x24 when 0). ctx bounds the whole session.
func (c *Client) OpenTerminal(ctx context.Context, id string, cols, rows int) (*Terminal, error) {
	u, err := url.Parse(c.base + sbPath(id, "/pty"))
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	q := url.Values{}
	if cols > 0 {
		q.Set("cols", strconv.Itoa(cols))
	}
	if rows > 0 {
		q.Set("rows", strconv.Itoa(rows))
	}
	u.RawQuery = q.Encode()
	hdr := http.Header{}
	if c.key != "" {
		hdr.Set("Authorization", "Bearer "+c.key)
	}
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 && resp.Body != nil {
			return nil, decodeError(resp)
		}
		return nil, fmt.Errorf("warren server at %s: opening a terminal: %w", c.base, err)
	}
	conn.SetReadLimit(1 << 20)
	return &Terminal{conn: conn, ctx: ctx}, nil
}

// Read reads what the terminal shows.
func (t *Terminal) Read(p []byte) (int, error) {
	for len(t.pending) == 0 {
		typ, data, err := t.conn.Read(t.ctx)
		if err != nil {
			if t.exit != nil || websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return 0, io.EOF
			}
			return 0, fmt.Errorf("terminal: %w", err)
		}
		if typ == websocket.MessageBinary {
			t.pending = data
			break
		}
		var m api.TerminalMessage
		if json.Unmarshal(data, &m) == nil && m.ExitCode != nil {
			code := *m.ExitCode
			t.exit = &code
		}
	}
	n := copy(p, t.pending)
	t.pending = t.pending[n:]
	return n, nil
}

// Write types p into the terminal.
func (t *Terminal) Write(p []byte) (int, error) {
	if err := t.conn.Write(t.ctx, websocket.MessageBinary, p); err != nil {
		return 0, fmt.Errorf("terminal: %w", err)
	}
	return len(p), nil
}

// Resize tells the terminal its new size.
func (t *Terminal) Resize(cols, rows int) error {
	b, _ := json.Marshal(api.TerminalMessage{Resize: &api.TerminalSize{Cols: cols, Rows: rows}})
	return t.conn.Write(t.ctx, websocket.MessageText, b)
}

// ExitCode is the shell's exit code, once Read has returned io.EOF after
// the shell exited; ok is false before, or when the connection ended
// without one.
func (t *Terminal) ExitCode() (code int, ok bool) {
	if t.exit == nil {
		return 0, false
	}
	return *t.exit, true
}

// Close ends the session; a shell still running is hung up.
func (t *Terminal) Close() error {
	return t.conn.Close(websocket.StatusNormalClosure, "")
}
