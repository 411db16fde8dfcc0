package api

import "time"

// Volumes, network policy, ports and credentials.

// ServiceAddr is the address every sandbox reaches the daemon's services at
// (its DNS resolver on port 53, the credential proxy on port 80), whatever
// its own address: the host redirects it to the host side of the sandbox's
// link. It stays the same across restores, so configuration that names it
// (resolv.conf, gitconfig) survives snapshots and forks.
const ServiceAddr = "169.254.64.1"

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	Name string `json:"name"`
	// SizeMB is the size of the volume's filesystem; the server's default
	// when 0.
	SizeMB int64 `json:"size_mb,omitempty"`
}

// Volume is durable storage that outlives sandboxes.
type Volume struct {
	Name      string    `json:"name"`
	SizeMB    int64     `json:"size_mb"`
	CreatedAt time.Time `json:"created_at"`
	// UsedBytes and AvailableBytes are what the volume's filesystem
	// reports (df): its own metadata takes a few percent of SizeMB.
	UsedBytes      int64 `json:"used_bytes"`
	AvailableBytes int64 `json:"available_bytes"`
	// UsedBy lists the sandboxes that mount the volume.
	UsedBy []string `json:"used_by"`
}

// VolumeList is the answer of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// NetworkPatch is the body of PATCH /v1/sandboxes/{id}/network; a field left
// out is left as it is.
type NetworkPatch struct {
	Egress         any       `json:"egress,omitempty"`
	GitCredentials *[]string `json:"git_credentials,omitempty"`
}

// CreateCredentialRequest is the body of POST /v1/credentials.
type CreateCredentialRequest struct {
	Name string `json:"name"`
	// URL is the prefix the credential is for, like https://github.com/.
	URL      string `json:"url"`
	Username string `json:"username"`
	Secret   string `json:"secret"`
}

// Credential is a credential as listed: never its secret.
type Credential struct {
	Name      string    `json:"name"`
	URL       string    `json:"url"`
	Username  string    `json:"username"`
	CreatedAt time.Time `json:"created_at"`
}

// CredentialList is the answer of GET /v1/credentials.
type CredentialList struct {
	Credentials []Credential `json:"credentials"`
}
