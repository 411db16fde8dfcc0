package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/warrenhq/warren/api"
)

// Client talks to one sandbox's agent. It is safe for concurrent use and
// keeps connections alive between calls.
//
// Error answers of the agent are *Error values, which wrap the api sentinel
// of their code. Failures to reach the agent wrap api.ErrUnavailable (unless
// the caller's context ended).
type Client struct {
	addr string
	base string
	tr   *http.Transport
	hc   *http.Client
}

// NewClient returns a client of the agent at addr ("10.0.0.2:49982").
func NewClient(addr string) *Client {
	d := &net.Dialer{Timeout: time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         d.DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	return &Client{
		addr: addr,
		base: "http://" + addr,
		tr:   tr,
		hc: &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
}

// BaseURL is "http://addr", for a reverse proxy to the agent.
func (c *Client) BaseURL() string { return c.base }

// Transport is the client's transport, for a reverse proxy to the agent.
func (c *Client) Transport() http.RoundTripper { return c.tr }

// CloseIdle closes idle connections, for instance after the sandbox was
// restored and its old connections are dead.
func (c *Client) CloseIdle() { c.tr.CloseIdleConnections() }

// do sends a request and returns the response of a 2xx answer; any other
// answer becomes an error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, header http.Header) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("agent %s %s: %w", method, path, err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("agent at %s: %w", c.addr, err)
		}
		return nil, fmt.Errorf("agent at %s: %w: %w", c.addr, api.ErrUnavailable, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

// decodeError reads an error answer.
func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb api.ErrorBody
	if err := json.Unmarshal(data, &eb); err == nil && eb.Error.Code != "" {
		return &Error{Code: eb.Error.Code, Message: eb.Error.Message}
	}
	return &Error{
		Code:    codeForStatus(resp.StatusCode),
		Message: fmt.Sprintf("agent answered %s: %s", resp.Status, bytes.TrimSpace(data)),
	}
}

func (c *Client) getJSON(ctx context.Context, path string, q url.Values, v any) error {
	resp, err := c.do(ctx, http.MethodGet, path, q, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("agent GET %s: decoding answer: %w", path, err)
	}
	return nil
}

// Health asks the agent whether it is up.
func (c *Client) Health(ctx context.Context) (api.AgentHealth, error) {
	var h api.AgentHealth
	err := c.getJSON(ctx, "/health", nil, &h)
	return h, err
}

// WaitReady polls Health every interval until the agent answers or ctx ends.
// Failures before that (connection refused while the sandbox boots) are
// expected; the last one is reported if ctx ends first.
func (c *Client) WaitReady(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		interval = 10 * time.Millisecond
	}
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for agent at %s: %w (last error: %v)", c.addr, ctx.Err(), last)
		case <-t.C:
		}
		if _, last = c.Health(ctx); last == nil {
			return nil
		}
		t.Reset(interval)
	}
}

func jsonBody(v any) (io.Reader, http.Header, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	return bytes.NewReader(data), http.Header{"Content-Type": {"application/json"}}, nil
}

// Exec runs a command and waits for it.
func (c *Client) Exec(ctx context.Context, req api.ExecRequest) (api.ExecResult, error) {
	body, h, err := jsonBody(req)
	if err != nil {
		return api.ExecResult{}, fmt.Errorf("encoding exec request: %w", err)
	}
	resp, err := c.do(ctx, http.MethodPost, "/exec", nil, body, h)
	if err != nil {
		return api.ExecResult{}, err
	}
	defer resp.Body.Close()
	var res api.ExecResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return api.ExecResult{}, fmt.Errorf("agent exec: decoding answer: %w", err)
	}
	return res, nil
}

// ExecStream runs a command and calls fn with each event as the output
// arrives, the last one carrying the exit code. If fn returns an error,
// ExecStream stops reading, which makes the agent kill the command, and
// returns it. A last event with an error (the agent failed after the
// command started) is passed to fn and also returned as an *Error.
func (c *Client) ExecStream(ctx context.Context, req api.ExecRequest, fn func(api.ExecEvent) error) error {
	body, h, err := jsonBody(req)
	if err != nil {
		return fmt.Errorf("encoding exec request: %w", err)
	}
	h.Set("Accept", ndjson)
	resp, err := c.do(ctx, http.MethodPost, "/exec", nil, body, h)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("agent exec stream ended before the exit code: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
		if ev.ExitCode != nil {
			if ev.Error != "" {
				return &Error{Code: api.CodeInternal, Message: ev.Error}
			}
			return nil
		}
	}
}

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// ReadFile returns the bytes of the file at path. Close the reader.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, http.MethodGet, "/files", pathQuery(path), nil, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile writes r to the file at path atomically, creating its parents.
// A zero mode means the agent's default (0644, or an existing file's mode).
func (c *Client) WriteFile(ctx context.Context, path string, r io.Reader, mode os.FileMode) (api.FileEntry, error) {
	q := pathQuery(path)
	if mode != 0 {
		q.Set("mode", modeString(mode))
	}
	resp, err := c.do(ctx, http.MethodPut, "/files", q, r, http.Header{"Content-Type": {"application/octet-stream"}})
	if err != nil {
		return api.FileEntry{}, err
	}
	defer resp.Body.Close()
	var e api.FileEntry
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		return api.FileEntry{}, fmt.Errorf("agent write %s: decoding answer: %w", path, err)
	}
	return e, nil
}

// Remove deletes the file or directory at path; a directory with entries
// needs recursive.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	resp, err := c.do(ctx, http.MethodDelete, "/files", q, nil, nil)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// List lists the directory at path, down to depth levels (1 to 32).
func (c *Client) List(ctx context.Context, path string, depth int) ([]api.FileEntry, error) {
	q := pathQuery(path)
	q.Set("depth", strconv.Itoa(depth))
	var l api.FileList
	if err := c.getJSON(ctx, "/files/list", q, &l); err != nil {
		return nil, err
	}
	return l.Entries, nil
}

// Stat describes the file at path without following a symlink.
func (c *Client) Stat(ctx context.Context, path string) (api.FileEntry, error) {
	var e api.FileEntry
	err := c.getJSON(ctx, "/files/stat", pathQuery(path), &e)
	return e, err
}
