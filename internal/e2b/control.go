package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/metrics"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

// Templates every Warren server has: both are the built-in image.
var builtinTemplates = map[string]bool{"": true, "base": true, "code-interpreter-v1": true}

// defaultTimeoutS is E2B's sandbox timeout when a create sets none.
const defaultTimeoutS = 300

// maxBody bounds a control-plane request body.
const maxBody = 1 << 20

// sandboxJSON is E2B's Sandbox (create, connect).
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
	Alias              string  `json:"alias,omitempty"`
}

// detailJSON is E2B's SandboxDetail and ListedSandbox.
type detailJSON struct {
	sandboxJSON
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
	State      string            `json:"state"`
	CPUCount   int               `json:"cpuCount"`
	MemoryMB   int64             `json:"memoryMB"`
	DiskSizeMB int64             `json:"diskSizeMB"`
	Metadata   map[string]string `json:"metadata"`
}

// errorJSON is the body of every control-plane error: the SDK branches on
// code, not on the HTTP status.
type errorJSON struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

var statusOf = map[string]int{
	api.CodeInvalid:      http.StatusBadRequest,
	api.CodeUnauthorized: http.StatusUnauthorized,
	api.CodeForbidden:    http.StatusForbidden,
	api.CodeNotFound:     http.StatusNotFound,
	api.CodeConflict:     http.StatusConflict,
	api.CodeQuota:        http.StatusTooManyRequests,
	api.CodeUnavailable:  http.StatusServiceUnavailable,
	api.CodeInternal:     http.StatusInternalServerError,
}

func httpStatus(err error) int {
	if s, ok := statusOf[api.CodeForError(err)]; ok {
		return s
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func (h *Handler) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := httpStatus(err)
	if status >= 500 {
		h.log.Error("e2b request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeJSON(w, status, errorJSON{Code: status, Message: err.Error()})
}

type controlFunc func(w http.ResponseWriter, r *http.Request, k store.Key) error

func (h *Handler) handle(pattern string, f controlFunc) {
	h.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		k, err := h.apiCaller(r)
		if err == nil {
			err = f(w, r, k)
		}
		if err != nil {
			h.writeError(w, r, err)
		}
	})
}

func (h *Handler) controlRoutes() {
	h.handle("POST /v2/sandboxes", h.create)
	h.handle("POST /sandboxes", h.create)
	h.handle("GET /v2/sandboxes", h.list)
	h.handle("GET /sandboxes", h.list)
	h.handle("GET /sandboxes/{id}", h.get)
	h.handle("DELETE /sandboxes/{id}", h.kill)
	h.handle("POST /sandboxes/{id}/timeout", h.setTimeout)
	h.handle("POST /sandboxes/{id}/pause", h.pause)
	h.handle("POST /v2/sandboxes/{id}/connect", h.connect)
	h.handle("POST /sandboxes/{id}/connect", h.connect)
	h.handle("POST /sandboxes/{id}/resume", h.connect)
	h.handle("POST /sandboxes/{id}/refreshes", h.setTimeout)
	h.handle("GET /sandboxes/{id}/metrics", h.metrics)
	h.handle("POST /sandboxes/{id}/snapshots", h.createSnapshot)
	h.handle("GET /snapshots", h.listSnapshots)
	h.handle("DELETE /templates/{id}", h.deleteSnapshot)
	h.handle("POST /sandboxes/{id}/fork", h.fork)
	h.handle("PUT /sandboxes/{id}/network", h.updateNetwork)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, fmt.Errorf("Warren's E2B facade does not serve %s %s: %w", r.Method, r.URL.Path, api.ErrNotFound))
	})
}

// decode reads a JSON body into v; unknown fields are ignored, since the
// SDK grows fields faster than this facade.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	if err != nil {
		return fmt.Errorf("reading the request body (at most %d bytes): %v: %w", maxBody, err, api.ErrInvalid)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("request body is not valid JSON for this call: %v: %w", err, api.ErrInvalid)
	}
	return nil
}

func (h *Handler) toSandbox(sb store.Sandbox, k store.Key) sandboxJSON {
	tok := accessToken(k, sb.ID)
	return sandboxJSON{
		TemplateID: templateID(sb), SandboxID: sb.ID, ClientID: "warren", EnvdVersion: EnvdVersion,
		EnvdAccessToken: tok, TrafficAccessToken: &tok,
	}
}

func templateID(sb store.Sandbox) string {
	switch {
	case sb.Template != "":
		return sb.Template
	case sb.FromSnapshot != "":
		return sb.FromSnapshot
	}
	return "base"
}

func (h *Handler) toDetail(sb store.Sandbox, k store.Key) detailJSON {
	s := h.toSandbox(sb, k)
	s.EnvdAccessToken = "" // detail carries none unless asked; connect hands it out
	s.TrafficAccessToken = nil
	state := "running"
	if sb.State == api.StatePaused {
		state = "paused"
	}
	end := sb.CreatedAt
	if sb.Idle.TimeoutS > 0 {
		end = time.Now().UTC().Add(time.Duration(sb.Idle.TimeoutS) * time.Second)
	}
	meta := sb.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	cpus := int(sb.CPUs + 0.999)
	if cpus < 1 {
		cpus = 1
	}
	return detailJSON{sandboxJSON: s, StartedAt: sb.CreatedAt, EndAt: end, State: state,
		CPUCount: cpus, MemoryMB: sb.MemoryMB, DiskSizeMB: sb.DiskMB, Metadata: meta}
}

// newSandboxV2 is E2B's create body; the fields Warren has no use for
// (mcp, iam, network, volumeMounts) are accepted and ignored.
type newSandboxV2 struct {
	TemplateID  string            `json:"templateID"`
	Timeout     *int              `json:"timeout"`
	Metadata    map[string]string `json:"metadata"`
	EnvVars     map[string]string `json:"envVars"`
	AutoPause   *bool             `json:"autoPause"`
	AllowInet   *bool             `json:"allow_internet_access"`
	Network     *networkJSON      `json:"network"`
	Secure      *bool             `json:"secure"`
	AutoResume  json.RawMessage   `json:"autoResume"`
	VolumeMount json.RawMessage   `json:"volumeMounts"`
}

func (h *Handler) create(w http.ResponseWriter, r *http.Request, k store.Key) error {
	var body newSandboxV2
	if err := decode(r, &body); err != nil {
		return err
	}
	req := api.CreateSandboxRequest{Env: body.EnvVars, Metadata: body.Metadata}
	switch tpl := body.TemplateID; {
	case builtinTemplates[tpl]:
	case strings.HasPrefix(tpl, "sn-"):
		req.Snapshot = tpl
	default:
		src, err := h.source(r.Context(), k.TeamID, tpl)
		if err != nil {
			return err
		}
		req.Template, req.Snapshot, req.Image = src.Template, src.Snapshot, src.Image
	}
	// E2B's timeout ends a sandbox nobody extends; Warren's nearest is the
	// idle policy. Warren keeps the sandbox (paused) rather than deleting
	// it, unless the program asked for that (lifecycle onTimeout "kill").
	timeout := defaultTimeoutS
	if body.Timeout != nil {
		timeout = *body.Timeout
	}
	req.Idle = &api.IdlePolicy{TimeoutS: timeout, Action: "pause"}
	if body.AutoPause != nil && !*body.AutoPause {
		req.Idle.Action = "delete"
	}
	if body.AllowInet != nil || body.Network != nil {
		n := networkJSON{AllowInet: body.AllowInet}
		if body.Network != nil {
			n.AllowOut, n.DenyOut = body.Network.AllowOut, body.Network.DenyOut
		}
		egress, err := n.egress()
		if err != nil {
			return err
		}
		req.Network = &api.Network{Egress: egress}
	}
	sb, err := h.m.Create(r.Context(), k.TeamID, req)
	if err != nil {
		return err
	}
	if err := h.waitAgent(r.Context(), k.TeamID, sb.ID); err != nil {
		return err
	}
	if builtinTemplates[body.TemplateID] {
		// E2B's templates have the home of their user "user", which
		// programs written for E2B name.
		if c, err := h.m.Agent(r.Context(), k.TeamID, sb.ID); err == nil {
			if _, err := c.Exec(r.Context(), api.ExecRequest{Cmd: []string{"mkdir", "-p", "/home/user"}, TimeoutS: 10}); err != nil {
				h.log.Warn("making /home/user", "sandbox_id", sb.ID, "err", err)
			}
		}
	}
	writeJSON(w, http.StatusCreated, h.toSandbox(sb, k))
	return nil
}

// source is what a templateID names, in this order: a Warren template, a
// snapshot's name (createSnapshot's name), else an image.
func (h *Handler) source(ctx context.Context, team, tpl string) (api.CreateSandboxRequest, error) {
	_, err := h.m.GetTemplate(ctx, team, tpl)
	switch {
	case err == nil:
		return api.CreateSandboxRequest{Template: tpl}, nil
	case !errors.Is(err, api.ErrNotFound):
		return api.CreateSandboxRequest{}, err
	}
	sns, err := h.m.ListSnapshots(ctx, store.SnapshotFilter{Team: team, Kind: "manual"})
	if err != nil {
		return api.CreateSandboxRequest{}, err
	}
	for i := len(sns) - 1; i >= 0; i-- { // the newest of that name
		if sns[i].Name == tpl {
			return api.CreateSandboxRequest{Snapshot: sns[i].ID}, nil
		}
	}
	return api.CreateSandboxRequest{Image: tpl}, nil
}

// waitAgent returns once the sandbox's agent answers: the SDK does not poll
// after create or connect.
func (h *Handler) waitAgent(ctx context.Context, team, id string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		c, err := h.m.Agent(ctx, team, id)
		if err == nil {
			if _, err = c.Health(ctx); err == nil {
				return nil
			}
		}
		if !errors.Is(err, api.ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sandbox %s: its agent did not answer within 30s: %v: %w", id, err, api.ErrUnavailable)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, k store.Key) error {
	sb, err := h.m.Get(r.Context(), k.TeamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.toDetail(sb, k))
	return nil
}

// list answers GET /v2/sandboxes?metadata=&state=&limit=&nextToken=. The
// next token is the id of the first sandbox of the next page.
func (h *Handler) list(w http.ResponseWriter, r *http.Request, k store.Key) error {
	q := r.URL.Query()
	f := store.Filter{Team: k.TeamID, Metadata: map[string]string{}}
	if m := q.Get("metadata"); m != "" {
		vals, err := url.ParseQuery(m)
		if err != nil {
			return fmt.Errorf("metadata=%q: want url-encoded key=value pairs: %w", m, api.ErrInvalid)
		}
		for key, v := range vals {
			f.Metadata[key] = v[0]
		}
	}
	states := []string{"running", "paused"}
	if s := q.Get("state"); s != "" {
		states = strings.Split(s, ",")
	}
	limit := 100
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			return fmt.Errorf("limit=%q: want a positive number: %w", l, api.ErrInvalid)
		}
		limit = n
	}
	sbs, err := h.m.List(r.Context(), f)
	if err != nil {
		return err
	}
	out := []detailJSON{}
	next := q.Get("nextToken")
	for _, sb := range sbs {
		d := h.toDetail(sb, k)
		if sb.State != api.StateRunning && sb.State != api.StatePaused || !slices.Contains(states, d.State) {
			continue
		}
		if next != "" {
			if sb.ID != next {
				continue
			}
			next = ""
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", sb.ID)
			break
		}
		out = append(out, d)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) kill(w http.ResponseWriter, r *http.Request, k store.Key) error {
	if err := h.m.Delete(r.Context(), k.TeamID, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setTimeout counts as activity: the idle clock starts again.
func (h *Handler) setTimeout(w http.ResponseWriter, r *http.Request, k store.Key) error {
	var body struct {
		Timeout int `json:"timeout"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := h.m.Get(r.Context(), k.TeamID, id); err != nil {
		return err
	}
	h.m.Touch(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) pause(w http.ResponseWriter, r *http.Request, k store.Key) error {
	id := r.PathValue("id")
	sb, err := h.m.Get(r.Context(), k.TeamID, id)
	if err != nil {
		return err
	}
	if sb.State == api.StatePaused {
		return fmt.Errorf("sandbox %s is already paused: %w", id, api.ErrConflict)
	}
	if _, err := h.m.Pause(r.Context(), k.TeamID, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) connect(w http.ResponseWriter, r *http.Request, k store.Key) error {
	var body struct {
		Timeout *int `json:"timeout"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	id := r.PathValue("id")
	sb, err := h.m.Get(r.Context(), k.TeamID, id)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if sb.State == api.StatePaused {
		if sb, err = h.m.Resume(r.Context(), k.TeamID, id); err != nil {
			return err
		}
		status = http.StatusCreated
	}
	if err := h.waitAgent(r.Context(), k.TeamID, id); err != nil {
		return err
	}
	writeJSON(w, status, h.toSandbox(sb, k))
	return nil
}

// cgroupParent is the cgroup the daemon puts sandboxes under.
const cgroupParent = "/warren"

// metricJSON is E2B's SandboxMetric.
type metricJSON struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       int64     `json:"memUsed"`
	MemTotal      int64     `json:"memTotal"`
	MemCache      int64     `json:"memCache"`
	DiskUsed      int64     `json:"diskUsed"`
	DiskTotal     int64     `json:"diskTotal"`
}

// metrics answers one sample, taken now from the sandbox's cgroup (CPU
// use over a tenth of a second), whatever the range asked: Warren keeps no
// history. A sandbox that does not run has none.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request, k store.Key) error {
	sb, err := h.m.Get(r.Context(), k.TeamID, r.PathValue("id"))
	if err != nil {
		return err
	}
	out := []metricJSON{}
	if sb.State == api.StateRunning && sb.RuntimeID != "" && !sb.Stored {
		cg := path.Join(cgroupParent, sb.RuntimeID)
		a, err := metrics.ReadCgroup(cg)
		if err == nil {
			t0 := time.Now()
			time.Sleep(100 * time.Millisecond)
			b, err := metrics.ReadCgroup(cg)
			if err == nil {
				cpus := h.toDetail(sb, k).CPUCount
				pct := (b.CPUSeconds - a.CPUSeconds) / time.Since(t0).Seconds() / float64(cpus) * 100
				total := b.MemoryLimitBytes
				if total == 0 {
					total = sb.MemoryMB << 20
				}
				now := time.Now().UTC()
				out = append(out, metricJSON{Timestamp: now, TimestampUnix: now.Unix(), CPUCount: cpus,
					CPUUsedPct: math.Round(max(pct, 0)*100) / 100, MemUsed: b.MemoryBytes, MemTotal: total,
					DiskTotal: sb.DiskMB << 20})
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

type snapshotJSON struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func toSnapshot(sn store.Snapshot) snapshotJSON {
	names := []string{}
	if sn.Name != "" {
		names = append(names, sn.Name)
	}
	return snapshotJSON{SnapshotID: sn.ID, Names: names}
}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request, k store.Key) error {
	var body struct {
		Name string `json:"name"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	sn, err := h.m.Snapshot(r.Context(), k.TeamID, r.PathValue("id"), body.Name, "manual")
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toSnapshot(sn))
	return nil
}

func (h *Handler) listSnapshots(w http.ResponseWriter, r *http.Request, k store.Key) error {
	q := r.URL.Query()
	sns, err := h.m.ListSnapshots(r.Context(), store.SnapshotFilter{Team: k.TeamID, SandboxID: q.Get("sandboxID"), Kind: "manual"})
	if err != nil {
		return err
	}
	out := []snapshotJSON{}
	for _, sn := range sns {
		if name := q.Get("name"); name != "" && sn.Name != name {
			continue
		}
		out = append(out, toSnapshot(sn))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (h *Handler) deleteSnapshot(w http.ResponseWriter, r *http.Request, k store.Key) error {
	if err := h.m.DeleteSnapshot(r.Context(), k.TeamID, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *Handler) fork(w http.ResponseWriter, r *http.Request, k store.Key) error {
	var body struct {
		Count int `json:"count"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Count == 0 {
		body.Count = 1
	}
	if body.Count < 0 || body.Count > sandbox.MaxFork {
		return fmt.Errorf("count %d: fork 1 to %d at a time: %w", body.Count, sandbox.MaxFork, api.ErrInvalid)
	}
	sbs, err := h.m.ForkSandbox(r.Context(), k.TeamID, r.PathValue("id"), body.Count)
	if err != nil {
		return err
	}
	type result struct {
		Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	}
	out := make([]result, 0, len(sbs))
	for _, sb := range sbs {
		s := h.toSandbox(sb, k)
		out = append(out, result{Sandbox: &s})
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// networkJSON is the part of E2B's network config Warren's egress policies
// can express: all traffic, none, or an allowlist of CIDRs and names.
type networkJSON struct {
	AllowInet *bool    `json:"allow_internet_access"`
	AllowOut  []string `json:"allowOut"`
	DenyOut   []string `json:"denyOut"`
}

const allTraffic = "0.0.0.0/0"

// egress is n as a Warren egress policy.
func (n networkJSON) egress() (any, error) {
	denyAll := n.AllowInet != nil && !*n.AllowInet
	for _, d := range n.DenyOut {
		if d != allTraffic {
			return nil, fmt.Errorf("denyOut %q: Warren's egress policies are allowlists; deny %s and list what is allowed in allowOut: %w", d, allTraffic, api.ErrInvalid)
		}
		denyAll = true
	}
	switch {
	case len(n.AllowOut) > 0 && denyAll:
		return n.AllowOut, nil
	case denyAll:
		return "none", nil
	}
	return "open", nil
}

func (h *Handler) updateNetwork(w http.ResponseWriter, r *http.Request, k store.Key) error {
	var body networkJSON
	if err := decode(r, &body); err != nil {
		return err
	}
	egress, err := body.egress()
	if err != nil {
		return err
	}
	if _, err := h.m.SetNetwork(r.Context(), k.TeamID, r.PathValue("id"), api.NetworkPatch{Egress: egress}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
