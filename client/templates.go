package client

import (
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
	var t *api.Template
	err = readLines(resp.Body, 8<<20, func(ev api.TemplateEvent) (bool, error) {
		switch {
		case ev.Error != "":
			return true, errors.New(ev.Error)
		case ev.Done != nil:
			t = ev.Done
			return true, nil
		case progress != nil:
			progress(ev)
		}
		return false, nil
	})
	if err != nil {
		return api.Template{}, err
	}
	if t == nil {
		return api.Template{}, fmt.Errorf("template build: the server ended the stream without a result: %w", ErrUnavailable)
	}
	return *t, nil
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
