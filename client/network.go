package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/warrenhq/warren/api"
)

// Volumes, network policy, ports and credentials.

// CreateVolume makes a volume of the caller's team.
func (c *Client) CreateVolume(ctx context.Context, req api.CreateVolumeRequest) (api.Volume, error) {
	var v api.Volume
	return v, c.doJSON(ctx, http.MethodPost, "/v1/volumes", nil, req, &v)
}

// ListVolumes lists the caller's volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]api.Volume, error) {
	var out api.VolumeList
	return out.Volumes, c.doJSON(ctx, http.MethodGet, "/v1/volumes", nil, nil, &out)
}

// GetVolume returns a volume with the space it uses.
func (c *Client) GetVolume(ctx context.Context, name string) (api.Volume, error) {
	var v api.Volume
	return v, c.doJSON(ctx, http.MethodGet, "/v1/volumes/"+url.PathEscape(name), nil, nil, &v)
}

// DeleteVolume deletes a volume and its data; ErrConflict while a sandbox
// mounts it.
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/volumes/"+url.PathEscape(name), nil, nil, nil)
}

// SetNetwork changes a sandbox's egress policy or git credentials; fields
// left nil stay.
func (c *Client) SetNetwork(ctx context.Context, id string, patch api.NetworkPatch) (api.Sandbox, error) {
	var sb api.Sandbox
	return sb, c.doJSON(ctx, http.MethodPatch, sbPath(id, "/network"), nil, patch, &sb)
}

// PortURL is the URL at which the server listening on port inside sandbox
// id is reached through the daemon (send the API key with requests).
func (c *Client) PortURL(id string, port int) string {
	return c.base + sbPath(id, "/ports/"+strconv.Itoa(port)+"/")
}

// CreateCredential stores a credential of the caller's team; its secret is
// never returned.
func (c *Client) CreateCredential(ctx context.Context, req api.CreateCredentialRequest) (api.Credential, error) {
	var cr api.Credential
	return cr, c.doJSON(ctx, http.MethodPost, "/v1/credentials", nil, req, &cr)
}

// ListCredentials lists the caller's credentials (names and URLs).
func (c *Client) ListCredentials(ctx context.Context) ([]api.Credential, error) {
	var out api.CredentialList
	return out.Credentials, c.doJSON(ctx, http.MethodGet, "/v1/credentials", nil, nil, &out)
}

// DeleteCredential revokes a credential at once.
func (c *Client) DeleteCredential(ctx context.Context, name string) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/credentials/"+url.PathEscape(name), nil, nil, nil)
}
