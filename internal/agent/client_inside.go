package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/warrenhq/warren/api"
)

// call sends a JSON body (none when in is nil) and decodes a JSON answer
// into out (skipped when out is nil).
func (c *Client) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var (
		body io.Reader
		h    http.Header
		err  error
	)
	if in != nil {
		if body, h, err = jsonBody(in); err != nil {
			return fmt.Errorf("encoding %s %s: %w", method, path, err)
		}
	}
	resp, err := c.do(ctx, method, path, q, body, h)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("agent %s %s: decoding answer: %w", method, path, err)
	}
	return nil
}

// CreateShell starts a named shell.
func (c *Client) CreateShell(ctx context.Context, req api.CreateShellRequest) (api.Shell, error) {
	var sh api.Shell
	return sh, c.call(ctx, http.MethodPost, "/shells", nil, req, &sh)
}

// Shells lists the named shells.
func (c *Client) Shells(ctx context.Context) ([]api.Shell, error) {
	var l api.ShellList
	return l.Shells, c.call(ctx, http.MethodGet, "/shells", nil, nil, &l)
}

// DeleteShell kills a named shell and what runs in it.
func (c *Client) DeleteShell(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/shells/"+url.PathEscape(name), nil, nil, nil)
}

// StartJob starts req as a background job (Background is set for you).
func (c *Client) StartJob(ctx context.Context, req api.ExecRequest) (api.Job, error) {
	req.Background = true
	var j api.Job
	return j, c.call(ctx, http.MethodPost, "/exec", nil, req, &j)
}

// Jobs lists the background jobs.
func (c *Client) Jobs(ctx context.Context) ([]api.Job, error) {
	var l api.JobList
	return l.Jobs, c.call(ctx, http.MethodGet, "/jobs", nil, nil, &l)
}

// Job returns one background job.
func (c *Client) Job(ctx context.Context, id string) (api.Job, error) {
	var j api.Job
	return j, c.call(ctx, http.MethodGet, "/jobs/"+url.PathEscape(id), nil, nil, &j)
}

// DeleteJob forgets an ended job and removes its output.
func (c *Client) DeleteJob(ctx context.Context, id string) error {
	return c.call(ctx, http.MethodDelete, "/jobs/"+url.PathEscape(id), nil, nil, nil)
}

// JobOutput reads a job's stdout or stderr from offset; with follow, until
// the job ends. It returns the reader and the offset its first byte is at.
func (c *Client) JobOutput(ctx context.Context, id, stream string, offset int64, follow bool) (io.ReadCloser, int64, error) {
	q := url.Values{"stream": {stream}, "offset": {strconv.FormatInt(offset, 10)}}
	if follow {
		q.Set("follow", "true")
	}
	resp, err := c.do(ctx, http.MethodGet, "/jobs/"+url.PathEscape(id)+"/output", q, nil, nil)
	if err != nil {
		return nil, 0, err
	}
	from, _ := strconv.ParseInt(resp.Header.Get(api.HeaderOffset), 10, 64)
	return resp.Body, from, nil
}

// KillJob signals a job's process group ("" is SIGTERM).
func (c *Client) KillJob(ctx context.Context, id, signal string) (api.Job, error) {
	var j api.Job
	return j, c.call(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/kill", nil, api.KillRequest{Signal: signal}, &j)
}

// WriteJobStdin writes r to a job's stdin, then closes it if closeStdin.
func (c *Client) WriteJobStdin(ctx context.Context, id string, r io.Reader, closeStdin bool) (api.Job, error) {
	q := url.Values{}
	if closeStdin {
		q.Set("close", "true")
	}
	resp, err := c.do(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/stdin", q, r,
		http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return api.Job{}, err
	}
	defer resp.Body.Close()
	var j api.Job
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return api.Job{}, fmt.Errorf("agent job stdin: decoding answer: %w", err)
	}
	return j, nil
}

// RunCode runs code in a code context.
func (c *Client) RunCode(ctx context.Context, req api.CodeRequest) (api.CodeResult, error) {
	var res api.CodeResult
	return res, c.call(ctx, http.MethodPost, "/code", nil, req, &res)
}

// CreateContext starts a code context.
func (c *Client) CreateContext(ctx context.Context, req api.CreateContextRequest) (api.CodeContext, error) {
	var cc api.CodeContext
	return cc, c.call(ctx, http.MethodPost, "/code/contexts", nil, req, &cc)
}

// Contexts lists the code contexts.
func (c *Client) Contexts(ctx context.Context) ([]api.CodeContext, error) {
	var l api.ContextList
	return l.Contexts, c.call(ctx, http.MethodGet, "/code/contexts", nil, nil, &l)
}

// DeleteContext ends a code context.
func (c *Client) DeleteContext(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/code/contexts/"+url.PathEscape(name), nil, nil, nil)
}

// RestartContext gives a code context a fresh interpreter.
func (c *Client) RestartContext(ctx context.Context, name string) (api.CodeContext, error) {
	var cc api.CodeContext
	return cc, c.call(ctx, http.MethodPost, "/code/contexts/"+url.PathEscape(name)+"/restart", nil, nil, &cc)
}

// ReadArchive returns a tar of the directory at path. Close the reader.
func (c *Client) ReadArchive(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, "/files/archive", pathQuery(path), nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteArchive extracts the tar read from r into the directory at path.
func (c *Client) WriteArchive(ctx context.Context, path string, r io.Reader) (api.ArchiveResult, error) {
	resp, err := c.do(ctx, http.MethodPut, "/files/archive", pathQuery(path), r, http.Header{"Content-Type": {"application/x-tar"}})
	if err != nil {
		return api.ArchiveResult{}, err
	}
	defer resp.Body.Close()
	var res api.ArchiveResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return api.ArchiveResult{}, fmt.Errorf("agent archive %s: decoding answer: %w", path, err)
	}
	return res, nil
}
