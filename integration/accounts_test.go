package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/client"
)

// Accounts end to end: teams and keys, isolation between teams on every
// endpoint, quotas, metering across a kill -9, events and webhooks,
// metrics.

// asTeam is a client of the server (at its current address: it changes
// at each restart) with key.
func asTeam(s *Server, key string) *client.Client { return client.New("http://"+s.Addr, key) }

// newTeam makes a team with a key, and removes the team's sandboxes and
// templates when the test ends (the harness cleans only the admin's).
func newTeam(t *testing.T, s *Server, name string) string {
	t.Helper()
	k, err := s.Client.CreateKey(ctxT(t), name, "test")
	if err != nil {
		t.Fatalf("creating a key for team %s: %v", name, err)
	}
	t.Cleanup(func() {
		if s.cmd == nil {
			s.Start()
		}
		ctx := context.Background()
		// The key may be revoked by now: the admin lists, the team's
		// key (or a new one) deletes.
		c := asTeam(s, k.Secret)
		if _, err := c.ListSandboxes(ctx, client.ListOptions{}); errors.Is(err, client.ErrUnauthorized) {
			nk, err := asTeam(s, s.adminKey()).CreateKey(ctx, name, "cleanup")
			if err != nil {
				t.Errorf("cleanup key for %s: %v", name, err)
				return
			}
			c = asTeam(s, nk.Secret)
		}
		if ts, err := c.ListTemplates(ctx); err == nil {
			for _, tpl := range ts {
				c.DeleteTemplate(ctx, tpl.Name)
			}
		}
		sbs, _ := c.ListSandboxes(ctx, client.ListOptions{})
		for _, sb := range sbs {
			if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
				t.Errorf("deleting %s's sandbox %s: %v", name, sb.ID, err)
			}
		}
		if vs, err := c.ListVolumes(ctx); err == nil {
			for _, v := range vs {
				if err := c.DeleteVolume(ctx, v.Name); err != nil {
					t.Errorf("deleting %s's volume %s: %v", name, v.Name, err)
				}
			}
		}
	})
	return k.Secret
}

func (s *Server) adminKey() string {
	b, _ := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
	return strings.TrimSpace(string(b))
}

// specRoutes lists every METHOD and path of api/openapi.yaml.
func specRoutes(t *testing.T) [][2]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	var out [][2]string
	for p, ops := range spec.Paths {
		for m := range ops {
			switch m {
			case "get", "put", "post", "delete", "patch":
				out = append(out, [2]string{strings.ToUpper(m), p})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][1]+out[i][0] < out[j][1]+out[j][0] })
	return out
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// TestAccountsCrossTeam: team B's key against each of team A's resources,
// on every endpoint the API describes, is not_found (forbidden where the
// admin key is needed) and changes nothing; B's lists show none of A's;
// a revoked key is unauthorized.
func TestAccountsCrossTeam(t *testing.T) {
	s := StartServerWith(t, map[string]any{"template_pool_size": 0})
	ctx := ctxT(t)
	keyA, keyB := newTeam(t, s, "alpha"), newTeam(t, s, "beta")
	a, b := asTeam(s, keyA), asTeam(s, keyB)

	// Team A's resources: a running sandbox with a file, a shell, a job
	// and a code context; a snapshot; a template; a webhook.
	sbA, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, sbA.ID, api.ExecRequest{Command: "echo alpha > /tmp/mark"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateShell(ctx, sbA.ID, api.CreateShellRequest{Name: "sh-a"}); err != nil {
		t.Fatal(err)
	}
	job, err := a.StartJob(ctx, sbA.ID, api.ExecRequest{Command: "sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	snA, err := a.SnapshotSandbox(ctx, sbA.ID, "snap-a")
	if err != nil {
		t.Fatal(err)
	}
	tplA, err := a.BuildTemplate(ctx, api.CreateTemplateRequest{Name: "tpl-a", Setup: []string{"true"}}, func(api.TemplateEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer hookSrv.Close()
	whA, err := a.CreateWebhook(ctx, hookSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	volA, err := a.CreateVolume(ctx, api.CreateVolumeRequest{Name: "vol-a", SizeMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	credA, err := a.CreateCredential(ctx, api.CreateCredentialRequest{Name: "cred-a", URL: "https://git.example/", Username: "a", Secret: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	keysA, err := s.Client.ListKeys(ctx, "alpha")
	if err != nil || len(keysA) != 1 {
		t.Fatalf("alpha's keys: %v, %v", keysA, err)
	}
	// Team B has a sandbox of its own, to point at A's snapshot.
	sbB, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}

	values := map[string]string{
		"/v1/sandboxes/{id}": sbA.ID, "/v1/snapshots/{id}": snA.ID, "/v1/templates/{name}": tplA.Name,
		"/v1/webhooks/{id}": whA.ID, "/v1/keys/{id}": keysA[0].ID, "/v1/teams/{team}": "alpha",
		"/v1/images/{name}": "debian:bookworm", "{job}": job.ID, "/shells/{name}": "sh-a",
		"/contexts/{name}": "default", "{port}": "8000", "{rest}": "x", "/v1/volumes/{name}": volA.Name,
		"/v1/credentials/{name}": credA.Name,
	}
	fill := func(path string) string {
		return pathParam.ReplaceAllStringFunc(path, func(param string) string {
			i := strings.Index(path, param)
			best, val := -1, "x"
			for k, v := range values {
				// The longest key that ends at this parameter wins.
				if j := strings.LastIndex(path[:i+len(param)], k); j >= 0 && j+len(k) == i+len(param) && len(k) > best {
					best, val = len(k), v
				}
			}
			return val
		})
	}
	bodies := map[string]string{
		"/revert": fmt.Sprintf(`{"snapshot":%q}`, snA.ID), "/fork": `{"count":1}`, "/exec": `{"command":"true"}`,
		"/network": `{"egress":"none"}`, "/shells": `{"name":"x"}`, "/code": `{"code":"1"}`, "/contexts": `{"name":"x"}`, "/quota": `{"running_sandboxes":100}`,
	}
	adminOnly := func(method, path string) bool {
		return strings.HasPrefix(path, "/v1/keys") || path == "/v1/teams" ||
			(method == "PUT" && strings.HasSuffix(path, "/quota")) ||
			(strings.HasPrefix(path, "/v1/images") && method != "GET")
	}
	tried := 0
	for _, r := range specRoutes(t) {
		method, path := r[0], r[1]
		if !strings.Contains(path, "{") {
			continue // lists and creates: checked below
		}
		target := fill(path)
		body := "{}"
		for suffix, b := range bodies {
			if strings.HasSuffix(path, suffix) {
				body = b
			}
		}
		q := ""
		if strings.Contains(path, "/files") {
			q = "?path=/tmp/mark"
		}
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+s.Addr+target+q, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+keyB)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, target, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusNotFound
		if adminOnly(method, path) {
			want = http.StatusForbidden
		}
		if resp.StatusCode != want {
			t.Errorf("team B: %s %s: status %d, want %d: %s", method, target, resp.StatusCode, want, msg)
		}
		tried++
	}
	t.Logf("team B's key tried %d routes against team A's resources", tried)
	if tried < 30 {
		t.Fatalf("only %d routes with parameters tried; has the spec's shape changed?", tried)
	}

	// Creates and reverts that name A's snapshot or template.
	for _, req := range []api.CreateSandboxRequest{{Snapshot: snA.ID}, {Template: tplA.Name}} {
		if _, err := b.CreateSandbox(ctx, req); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("team B creating from %+v: got %v, want not found", req, err)
		}
	}
	if _, err := b.RevertSandbox(ctx, sbB.ID, snA.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("team B reverting its sandbox to A's snapshot: got %v, want not found", err)
	}
	// B's lists show none of A's.
	if sbs, _ := b.ListSandboxes(ctx, client.ListOptions{}); len(sbs) != 1 || sbs[0].ID != sbB.ID {
		t.Errorf("team B's sandboxes: got %+v, want only its own", sbs)
	}
	for _, sandboxID := range []string{"", sbA.ID} {
		if sns, _ := b.ListSnapshots(ctx, sandboxID); len(sns) != 0 {
			t.Errorf("team B's snapshots (sandbox=%q): got %+v, want none", sandboxID, sns)
		}
	}
	if ts, _ := b.ListTemplates(ctx); len(ts) != 0 {
		t.Errorf("team B's templates: got %+v", ts)
	}
	if ws, _ := b.ListWebhooks(ctx); len(ws) != 0 {
		t.Errorf("team B's webhooks: got %+v", ws)
	}
	if vs, _ := b.ListVolumes(ctx); len(vs) != 0 {
		t.Errorf("team B's volumes: got %+v", vs)
	}
	if cs, _ := b.ListCredentials(ctx); len(cs) != 0 {
		t.Errorf("team B's credentials: got %+v", cs)
	}
	if _, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Volume: volA.Name, Path: "/data"}}}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("team B mounting A's volume: got %v, want not found", err)
	}
	u, err := b.Usage(ctx, client.UsageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, su := range u.Sandboxes {
		if su.SandboxID != sbB.ID {
			t.Errorf("team B's usage lists %s", su.SandboxID)
		}
	}
	var seen []api.Event
	ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
	b.Events(ectx, 0, func(ev api.Event) error { seen = append(seen, ev); return nil })
	cancel()
	for _, ev := range seen {
		if ev.SandboxID != sbB.ID {
			t.Errorf("team B's events include %+v", ev)
		}
	}

	// Nothing of A's changed.
	got, err := a.GetSandbox(ctx, sbA.ID)
	if err != nil || got.State != api.StateRunning || got.Name != "mine" {
		t.Errorf("A's sandbox: got %+v, %v", got, err)
	}
	if res, err := a.Exec(ctx, sbA.ID, api.ExecRequest{Command: "cat /tmp/mark"}); err != nil || res.Stdout != "alpha\n" {
		t.Errorf("A's file: got %+v, %v", res, err)
	}
	if shells, err := a.ListShells(ctx, sbA.ID); err != nil || !slices.ContainsFunc(shells, func(s api.Shell) bool { return s.Name == "sh-a" }) {
		t.Errorf("A's shells: got %+v, %v", shells, err)
	}
	if j, err := a.GetJob(ctx, sbA.ID, job.ID); err != nil || j.State != "running" {
		t.Errorf("A's job: got %+v, %v", j, err)
	}
	if _, err := a.GetSnapshot(ctx, snA.ID); err != nil {
		t.Errorf("A's snapshot: %v", err)
	}
	if _, err := a.GetTemplate(ctx, tplA.Name); err != nil {
		t.Errorf("A's template: %v", err)
	}
	if ws, _ := a.ListWebhooks(ctx); len(ws) != 1 {
		t.Errorf("A's webhooks: got %+v", ws)
	}
	if _, err := a.GetVolume(ctx, volA.Name); err != nil {
		t.Errorf("A's volume: %v", err)
	}
	if cs, _ := a.ListCredentials(ctx); len(cs) != 1 {
		t.Errorf("A's credentials: got %+v", cs)
	}
	if keys, _ := s.Client.ListKeys(ctx, "alpha"); len(keys) != 1 || keys[0].RevokedAt != nil {
		t.Errorf("A's key: got %+v", keys)
	}

	// A revoked key is unauthorized at once, everywhere.
	keysB, _ := s.Client.ListKeys(ctx, "beta")
	if err := s.Client.RevokeKey(ctx, keysB[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ListSandboxes(ctx, client.ListOptions{}); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("a revoked key listing: got %v, want unauthorized", err)
	}
	if _, err := b.GetSandbox(ctx, sbB.ID); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("a revoked key on its own sandbox: got %v, want unauthorized", err)
	}
	if _, err := a.GetSandbox(ctx, sbA.ID); err != nil {
		t.Errorf("A's key after B's was revoked: %v", err)
	}
}

// TestAccountsQuota: the N+1th running sandbox is refused with the
// figures, nothing half-made; pausing one makes room; a resume and a fork
// over the quota are refused too, the fork before it snapshots.
func TestAccountsQuota(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	key := newTeam(t, s, "quota")
	c := asTeam(s, key)
	if _, err := s.Client.SetQuota(ctx, "quota", api.Limits{RunningSandboxes: ptr(int64(2))}); err != nil {
		t.Fatal(err)
	}
	var sbs []api.Sandbox
	for range 2 {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: ptr(int64(256))})
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: ptr(int64(256))})
	var e *client.Error
	if !errors.Is(err, client.ErrQuota) || !errors.As(err, &e) || e.Status != http.StatusTooManyRequests {
		t.Fatalf("the third: got %v, want 429 quota", err)
	}
	if e.Quota == nil || e.Quota.Limit != "running_sandboxes" || e.Quota.Max != 2 || e.Quota.Used != 2 || e.Quota.Requested != 1 {
		t.Errorf("quota figures: got %+v", e.Quota)
	}
	if !strings.Contains(e.Message, "limit of 2") {
		t.Errorf("message: %q", e.Message)
	}
	if list, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(list) != 2 {
		t.Errorf("after a refusal: %d sandboxes, want 2 (nothing half-made)", len(list))
	}
	// A fork over the quota is refused before it snapshots.
	if _, err := c.ForkSandbox(ctx, sbs[0].ID, 1); !errors.Is(err, client.ErrQuota) {
		t.Errorf("a fork over the quota: got %v", err)
	}
	if sns, _ := c.ListSnapshots(ctx, ""); len(sns) != 0 {
		t.Errorf("a refused fork left snapshots: %+v", sns)
	}

	// Pausing one makes room.
	if _, err := c.PauseSandbox(ctx, sbs[0].ID); err != nil {
		t.Fatal(err)
	}
	third, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{MemoryMB: ptr(int64(256))})
	if err != nil {
		t.Fatalf("after a pause: %v", err)
	}
	// Now resuming the paused one is over.
	if _, err := c.ResumeSandbox(ctx, sbs[0].ID); !errors.Is(err, client.ErrQuota) {
		t.Errorf("resuming over the quota: got %v", err)
	}
	if got, _ := c.GetSandbox(ctx, sbs[0].ID); got.State != api.StatePaused {
		t.Errorf("a refused resume changed the state to %s", got.State)
	}
	q, err := c.Quota(ctx, "")
	if err != nil || q.Used.RunningSandboxes != 2 || q.Used.RunningMemoryMB != 512 || *q.Limits.RunningSandboxes != 2 {
		t.Errorf("quota: got %+v, %v", q, err)
	}
	if _, err := c.PauseSandbox(ctx, third.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, sbs[0].ID); err != nil {
		t.Errorf("resume after another pause: %v", err)
	}
	// The admin's team has its own quota.
	adminSb, err := s.Client.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Errorf("another team at the same time: %v", err)
	} else {
		s.Client.DeleteSandbox(ctx, adminSb.ID)
	}
}

// TestAccountsMetering: a sandbox run for a measured time, then paused,
// is billed for the running part only; the figures survive a kill -9 of
// the server; a kill -9 while it runs loses at most one flush interval.
//
// Tolerance: compute is recorded from the moment the server records the
// sandbox running until it records it paused. Both are inside the client's
// calls, so the billed time lies between [create returned, pause called]
// and [create called, pause returned]: no margin is needed beyond those
// bounds. After a kill -9, what was billed since the last flush (at most
// usage_flush_s = 1 s) is lost; the time the server is down is not billed.
func TestAccountsMetering(t *testing.T) {
	s := StartServerWith(t, map[string]any{"usage_flush_s": 1})
	ctx := ctxT(t)
	key := newTeam(t, s, "meter")
	c := asTeam(s, key)

	createCalled := time.Now()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{CPUs: ptr(0.5), MemoryMB: ptr(int64(256))})
	if err != nil {
		t.Fatal(err)
	}
	createReturned := time.Now()
	time.Sleep(3 * time.Second)
	pauseCalled := time.Now()
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	pauseReturned := time.Now()
	lo, hi := pauseCalled.Sub(createReturned).Seconds(), pauseReturned.Sub(createCalled).Seconds()

	usageOf := func() api.SandboxUsage {
		t.Helper()
		u, err := asTeam(s, key).Usage(ctx, client.UsageOptions{From: createCalled.Add(-time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		for _, su := range u.Sandboxes {
			if su.SandboxID == sb.ID {
				return su
			}
		}
		t.Fatalf("no usage of %s in %+v", sb.ID, u)
		return api.SandboxUsage{}
	}
	u1 := usageOf()
	t.Logf("ran %.3f-%.3f s; billed %.3f s running, %.3f vCPU-s, %.3f GB-s", lo, hi, u1.RunningSeconds, u1.VCPUSeconds, u1.MemoryGBSeconds)
	if u1.RunningSeconds < lo || u1.RunningSeconds > hi {
		t.Errorf("running: got %.3f s, want between %.3f and %.3f", u1.RunningSeconds, lo, hi)
	}
	if d := u1.VCPUSeconds - 0.5*u1.RunningSeconds; d > 1e-6 || d < -1e-6 {
		t.Errorf("vCPU-seconds: got %v, want half the running time", u1.VCPUSeconds)
	}
	if d := u1.MemoryGBSeconds - 0.25*u1.RunningSeconds; d > 1e-6 || d < -1e-6 {
		t.Errorf("memory GB-seconds: got %v, want a quarter of the running time", u1.MemoryGBSeconds)
	}
	if u1.Cost.Total <= 0 {
		t.Errorf("cost: got %+v", u1.Cost)
	}

	// Paused, it costs no compute.
	time.Sleep(2 * time.Second)
	if u := usageOf(); u.RunningSeconds != u1.RunningSeconds {
		t.Errorf("while paused: running went from %.6f to %.6f s", u1.RunningSeconds, u.RunningSeconds)
	}
	if u := usageOf(); u.StorageGBHours <= 0 {
		t.Errorf("storage: got %v GB-h, want more than 0 (it holds a writable layer)", u.StorageGBHours)
	}

	// kill -9 while paused: nothing lost, nothing counted twice.
	s.Kill()
	s.Start()
	if u := usageOf(); u.RunningSeconds != u1.RunningSeconds {
		t.Errorf("after kill -9 while paused: running went from %.6f to %.6f s", u1.RunningSeconds, u.RunningSeconds)
	}

	// kill -9 while it runs: at most one flush interval (1 s) is lost.
	resumeCalled := time.Now()
	if _, err := asTeam(s, key).ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	resumeReturned := time.Now()
	time.Sleep(3 * time.Second)
	killed := time.Now()
	s.Kill()
	restarted := time.Now()
	s.Start()
	if _, err := asTeam(s, key).PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	pausedAgain := time.Now()
	u2 := usageOf()
	added := u2.RunningSeconds - u1.RunningSeconds
	// Before the kill: from resume to the last flush (at most 1 s, plus
	// the write, before the kill). After the restart: until the pause.
	lo2 := killed.Sub(resumeReturned).Seconds() - 1.5
	hi2 := killed.Sub(resumeCalled).Seconds() + pausedAgain.Sub(restarted).Seconds()
	t.Logf("ran %.3f s before the kill; billed %.3f s more (want %.3f-%.3f)", killed.Sub(resumeReturned).Seconds(), added, lo2, hi2)
	if added < lo2 || added > hi2 {
		t.Errorf("after kill -9 while running: %.3f s more, want between %.3f and %.3f", added, lo2, hi2)
	}
}

// TestAccountsEvents: a team's lifecycle events arrive in order, on the
// stream and at a webhook (signed); a stream resumes after Last-Event-ID,
// also across a kill -9; another team sees none; metrics count them.
func TestAccountsEvents(t *testing.T) {
	s := StartServer(t)
	ctx := ctxT(t)
	key := newTeam(t, s, "events")
	other := asTeam(s, newTeam(t, s, "others"))
	c := asTeam(s, key)

	var mu sync.Mutex
	var hooked []api.Event
	var badSig int
	var secret string
	hookSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := client.VerifyWebhook(secret, r.Header, body, time.Minute); err != nil {
			badSig++
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var ev api.Event
		if err := json.Unmarshal(body, &ev); err != nil {
			badSig++
			return
		}
		hooked = append(hooked, ev)
	}))
	defer hookSrv.Close()
	mu.Lock()
	wh, err := c.CreateWebhook(ctx, hookSrv.URL+"/warren")
	if err != nil {
		mu.Unlock()
		t.Fatal(err)
	}
	secret = wh.Secret
	mu.Unlock()

	stream := make(chan api.Event, 100)
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go c.Events(sctx, 0, func(ev api.Event) error { stream <- ev; return nil })

	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	sn, err := c.SnapshotSandbox(ctx, sb.ID, "e")
	if err != nil {
		t.Fatal(err)
	}
	forks, err := c.ForkSnapshot(ctx, sn.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.RevertSandbox(ctx, sb.ID, sn.ID); err != nil {
		t.Fatal(err)
	}
	s.Client.SetQuota(ctx, "events", api.Limits{RunningSandboxes: ptr(int64(2))})
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{}); !errors.Is(err, client.ErrQuota) {
		t.Fatalf("a create over the quota: got %v", err)
	}
	if err := c.DeleteSandbox(ctx, forks[0].ID); err != nil {
		t.Fatal(err)
	}
	want := []struct{ kind, sandbox string }{
		{api.EventCreated, sb.ID}, {api.EventPaused, sb.ID}, {api.EventResumed, sb.ID}, {api.EventSnapshotted, sb.ID},
		{api.EventForked, forks[0].ID}, {api.EventRestored, sb.ID}, {api.EventReverted, sb.ID},
		{api.EventQuotaRefused, ""}, {api.EventDeleted, forks[0].ID},
	}
	var got []api.Event
	for len(got) < len(want) {
		select {
		case ev := <-stream:
			got = append(got, ev)
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far: %+v; want %d", got, len(want))
		}
	}
	for i, w := range want {
		if got[i].Kind != w.kind || got[i].SandboxID != w.sandbox {
			t.Errorf("event %d: got %s %s, want %s %s", i, got[i].Kind, got[i].SandboxID, w.kind, w.sandbox)
		}
		if i > 0 && got[i].ID <= got[i-1].ID {
			t.Errorf("event %d: id %d after %d", i, got[i].ID, got[i-1].ID)
		}
	}
	if got[3].SnapshotID != sn.ID || got[7].Op != "create" {
		t.Errorf("details: snapshotted %+v, quota-refused %+v", got[3], got[7])
	}

	// Resuming after the third event gives the fourth on, in order.
	rctx, rstop := context.WithCancel(ctx)
	resumed := make(chan api.Event, 100)
	go c.Events(rctx, got[2].ID, func(ev api.Event) error { resumed <- ev; return nil })
	for i := 3; i < len(want); i++ {
		select {
		case ev := <-resumed:
			if ev.ID != got[i].ID || ev.Kind != got[i].Kind {
				t.Errorf("resumed event: got %d %s, want %d %s", ev.ID, ev.Kind, got[i].ID, got[i].Kind)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the resumed stream stopped")
		}
	}
	rstop()

	// The webhook got the same, in order, signed.
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(hooked)
		mu.Unlock()
		if n >= len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	if badSig > 0 || len(hooked) < len(want) {
		t.Errorf("webhook: %d deliveries with a bad signature, %d good, want %d", badSig, len(hooked), len(want))
	}
	for i := 0; i < len(hooked) && i < len(want); i++ {
		if hooked[i].ID != got[i].ID || hooked[i].Kind != got[i].Kind {
			t.Errorf("webhook delivery %d: got %d %s, want %d %s", i, hooked[i].ID, hooked[i].Kind, got[i].ID, got[i].Kind)
		}
	}
	mu.Unlock()

	// Metrics count them (admin key).
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+s.Addr+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.adminKey())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, w := range []string{`warren_sandboxes{state="running"} 1`, `warren_operation_duration_seconds_count{op="create"} 1`,
		`warren_operation_duration_seconds_count{op="fork"} 1`, `warren_operation_duration_seconds_count{op="restore"} 1`,
		`warren_operation_errors_total{code="quota",op="create"} 1`, "warren_host_memory_available_bytes", "warren_host_disk_available_bytes"} {
		if !strings.Contains(string(body), w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
	m, err := c.SandboxMetrics(ctx, sb.ID)
	if err != nil || m.MemoryBytes <= 0 || m.CPUSeconds <= 0 || m.State != api.StateRunning {
		t.Errorf("sandbox metrics: got %+v, %v", m, err)
	}
	t.Logf("sandbox metrics: %+v", m)

	// Another team saw nothing of this.
	var others []api.Event
	octx, ostop := context.WithTimeout(ctx, time.Second)
	other.Events(octx, 0, func(ev api.Event) error { others = append(others, ev); return nil })
	ostop()
	if len(others) != 0 {
		t.Errorf("another team's stream: got %+v", others)
	}

	// Across a kill -9, a stream resumes after the last id, and new ids
	// are higher.
	stop()
	last := got[len(got)-1].ID
	s.Kill()
	s.Start()
	c = asTeam(s, key)
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	after := make(chan api.Event, 10)
	actx, astop := context.WithCancel(ctx)
	defer astop()
	go c.Events(actx, last, func(ev api.Event) error { after <- ev; return nil })
	select {
	case ev := <-after:
		if ev.ID <= last || ev.Kind != api.EventDeleted || ev.SandboxID != sb.ID {
			t.Errorf("after a restart: got %+v, want the delete with an id above %d", ev, last)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after a restart")
	}
}
