package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/warrenhq/warren/api"
)

// BuildTemplate builds (or rebuilds) a template: boots its image, runs its
// setup commands, waits until idle and snapshots it. progress, if not nil,
// gets the setup's output as it comes.
func (c *Client) BuildTemplate(ctx context.Context, req api.CreateTemplateRequest, progress func(api.TemplateEvent)) (api.Template, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return api.Template{}, err
	}
	hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/x-ndjson"}}
	resp, err := c.request(ctx, http.MethodPost, "/v1/templates", nil, bytes.NewReader(b), hdr)
	if err != nil {
		return api.Template{}, err
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		var t api.Template
		return t, json.NewDecoder(resp.Body).Decode(&t)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		var ev api.TemplateEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return api.Template{}, fmt.Errorf("decoding a template build event: %w", err)
		}
		switch {
		case ev.Error != "":
			return api.Template{}, errors.New(ev.Error)
		case ev.Done != nil:
			return *ev.Done, nil
		case progress != nil:
			progress(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return api.Template{}, err
	}
	return api.Template{}, fmt.Errorf("template build: the server ended the stream without a result: %w", ErrUnavailable)
}

// ListTemplates lists the caller's templates.
func (c *Client) ListTemplates(ctx context.Context) ([]api.Template, error) {
	var out api.TemplateList
	return out.Templates, c.doJSON(ctx, http.MethodGet, "/v1/templates", nil, nil, &out)
}

// GetTemplate returns a template, with the output of its last build.
func (c *Client) GetTemplate(ctx context.Context, name string) (api.Template, error) {
	var t api.Template
	return t, c.doJSON(ctx, http.MethodGet, "/v1/templates/"+url.PathEscape(name), nil, nil, &t)
}

// DeleteTemplate deletes a template; sandboxes made from it are not affected.
func (c *Client) DeleteTemplate(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/templates/"+url.PathEscape(name), nil, nil, nil)
}
