package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
)

// The stock E2B SDKs, as a user installs them from npm.
const (
	e2bVersion   = "2.51.0"
	e2bCIVersion = "2.8.0"
)

// e2bModules installs the e2b and @e2b/code-interpreter npm packages once
// into the cache directory, and returns their node_modules.
func e2bModules(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: the E2B SDK tests run the stock npm packages (install Node.js 20+)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the E2B SDK tests run the stock npm packages (install Node.js 20+)")
	}
	dir := filepath.Join(cacheDir, "npm", "e2b-"+e2bVersion+"-ci-"+e2bCIVersion)
	modules := filepath.Join(dir, "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "@e2b", "code-interpreter", "package.json")); err == nil {
		return modules
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".e2b-install-")
	if err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if tmp, err = os.MkdirTemp(filepath.Dir(dir), ".e2b-install-"); err != nil {
			t.Fatal(err)
		}
	}
	defer os.RemoveAll(tmp)
	os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"name":"warren-e2b-test","private":true}`), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
		"e2b@"+e2bVersion, "@e2b/code-interpreter@"+e2bCIVersion)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install e2b@%s @e2b/code-interpreter@%s: %v\n%s", e2bVersion, e2bCIVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, serr := os.Stat(modules); serr != nil {
			t.Fatalf("caching the npm packages: %v", err)
		}
	}
	return modules
}

// runE2BScript runs a Node.js script against s with the stock SDK
// configured the way a user would: the three environment variables, plain
// http, one port.
func runE2BScript(t *testing.T, s *Server, script string) string {
	t.Helper()
	modules := e2bModules(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "script.js")
	head := "const { Sandbox } = require(" + jsString(filepath.Join(modules, "e2b")) + ");\n" +
		"const CI = require(" + jsString(filepath.Join(modules, "@e2b", "code-interpreter")) + ");\n" +
		"const assert = require('node:assert/strict');\n" +
		"const step = (s) => console.log('step: ' + s);\n" +
		"(async () => {\n"
	tail := "\n})().then(() => console.log('E2B SCRIPT OK'), (e) => { console.error('FAILED:', e); process.exit(1); });\n"
	if err := os.WriteFile(path, []byte(head+script+tail), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_KEY="+e2bAPIKey(t, s),
		"E2B_API_URL=http://"+s.Addr,
		"E2B_SANDBOX_URL=http://"+s.Addr,
	)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("E2B SCRIPT OK")) {
		t.Fatalf("node script: %v\n%s", err, out)
	}
	return string(out)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func e2bAPIKey(t *testing.T, s *Server) string {
	key, err := os.ReadFile(filepath.Join(s.StateDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(key))
}

// TestE2BSDK runs the stock e2b SDK's everyday calls against Warren.
func TestE2BSDK(t *testing.T) {
	RequiresRoot(t)
	s := StartServer(t)
	runE2BScript(t, s, `
	step('create');
	const sbx = await Sandbox.create();
	assert.match(sbx.sandboxId, /^sb-/);

	step('run echo');
	const r = await sbx.commands.run('echo hi');
	assert.equal(r.stdout, 'hi\n');
	assert.equal(r.exitCode, 0);

	step('exit code and stderr');
	await assert.rejects(sbx.commands.run('echo oops >&2; exit 3'), (e) => {
		assert.equal(e.exitCode, 3);
		assert.equal(e.stderr, 'oops\n');
		return true;
	});

	assert.equal((await sbx.commands.run('pwd', { cwd: '/home/user' })).stdout, '/home/user\n');

	step('streamed output, env and cwd');
	let seen = '';
	const r2 = await sbx.commands.run('for i in 1 2 3; do echo $i; done; echo $FOO; pwd', {
		envs: { FOO: 'bar' }, cwd: '/tmp', onStdout: (d) => { seen += d; },
	});
	assert.equal(r2.stdout, '1\n2\n3\nbar\n/tmp\n');
	assert.equal(seen, r2.stdout);

	step('files write/read');
	await sbx.files.write('/tmp/hello.txt', 'hello warren');
	assert.equal(await sbx.files.read('/tmp/hello.txt'), 'hello warren');
	assert.equal((await sbx.commands.run('cat /tmp/hello.txt')).stdout, 'hello warren');

	step('relative paths are in the working directory');
	await sbx.files.write('rel.txt', 'relative');
	const wd = (await sbx.commands.run('pwd')).stdout.trim();
	assert.equal((await sbx.commands.run('cat rel.txt')).stdout, 'relative');
	assert.equal(await sbx.files.read(wd + '/rel.txt'), 'relative');
	assert.equal(await sbx.files.exists('rel.txt'), true);

	step('files dirs');
	assert.equal(await sbx.files.makeDir('/tmp/d/e'), true);
	assert.equal(await sbx.files.makeDir('/tmp/d/e'), false);
	await sbx.files.write('/tmp/d/e/a.txt', 'a');
	const ls = await sbx.files.list('/tmp/d/e');
	assert.deepEqual(ls.map((e) => [e.name, e.type]), [['a.txt', 'file']]);
	const info = await sbx.files.getInfo('/tmp/d/e/a.txt');
	assert.equal(info.size, 1);
	await sbx.files.rename('/tmp/d/e/a.txt', '/tmp/d/b.txt');
	assert.equal(await sbx.files.exists('/tmp/d/e/a.txt'), false);
	assert.equal(await sbx.files.read('/tmp/d/b.txt'), 'a');
	await sbx.files.remove('/tmp/d');
	assert.equal(await sbx.files.exists('/tmp/d'), false);
	await assert.rejects(sbx.files.read('/tmp/nope'));

	step('background, list, stdin, kill');
	const bg = await sbx.commands.run('cat; sleep 300', { background: true, stdin: true });
	const procs = await sbx.commands.list();
	const p = procs.find((p) => p.pid === bg.pid);
	assert.ok(p, 'the background process is listed: ' + JSON.stringify(procs));
	assert.equal(p.cmd, '/bin/bash');
	await sbx.commands.sendStdin(bg.pid, 'from stdin\n');
	for (let i = 0; i < 100 && !bg.stdout.includes('from stdin'); i++) await new Promise((r) => setTimeout(r, 50));
	assert.equal(bg.stdout, 'from stdin\n');
	assert.equal(await sbx.commands.kill(bg.pid), true);
	await assert.rejects(bg.wait());
	assert.equal(await sbx.commands.kill(bg.pid), false);

	step('closeStdin, commands.connect');
	const cat = await sbx.commands.run('cat', { background: true, stdin: true });
	await sbx.commands.sendStdin(cat.pid, 'abc');
	await sbx.commands.closeStdin(cat.pid);
	assert.equal((await cat.wait()).stdout, 'abc');
	const slow = await sbx.commands.run('sleep 1; echo later', { background: true });
	const attached = await sbx.commands.connect(slow.pid);
	assert.equal((await attached.wait()).stdout, 'later\n');

	step('gzip upload');
	await sbx.files.write('/tmp/gz.txt', 'zipped', { gzip: true });
	assert.equal(await sbx.files.read('/tmp/gz.txt'), 'zipped');

	step('watchDir');
	await sbx.files.makeDir('/tmp/w');
	const events = [];
	const watch = await sbx.files.watchDir('/tmp/w', (ev) => { events.push(ev.type + ' ' + ev.name); }, { recursive: true });
	await sbx.files.write('/tmp/w/new.txt', 'x');
	const waitFor = async (what) => {
		for (let i = 0; i < 100 && !events.includes(what); i++) await new Promise((r) => setTimeout(r, 50));
		assert.ok(events.includes(what), 'saw ' + what + ' in ' + JSON.stringify(events));
	};
	await waitFor('create new.txt');
	await sbx.files.remove('/tmp/w/new.txt');
	await waitFor('remove new.txt');
	await watch.stop();
	await assert.rejects(sbx.files.watchDir('/tmp/nodir', () => {}));

	step('pty');
	let term = '';
	const decoder = new TextDecoder();
	const pty = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => { term += decoder.decode(d); } });
	assert.ok((await sbx.commands.list()).some((p) => p.pid === pty.pid), 'the terminal is listed');
	await sbx.pty.resize(pty.pid, { cols: 120, rows: 40 });
	await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; echo pty-$((6*7))\n'));
	for (let i = 0; i < 100 && !term.includes('pty-42'); i++) await new Promise((r) => setTimeout(r, 50));
	assert.ok(term.includes('pty-42'), 'terminal output: ' + JSON.stringify(term));
	assert.ok(term.includes('40 120'), 'resized: ' + JSON.stringify(term));
	await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('exit 5\n'));
	await assert.rejects(pty.wait(), (e) => { assert.equal(e.exitCode, 5); return true; });
	const pty2 = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
	assert.equal(await sbx.pty.kill(pty2.pid), true);
	await assert.rejects(pty2.wait());

	step('control plane: getInfo, list, setTimeout');
	const det = await sbx.getInfo();
	assert.equal(det.sandboxId, sbx.sandboxId);
	assert.equal(det.state, 'running');
	const listed = await Sandbox.list().nextItems();
	assert.ok(listed.some((x) => x.sandboxId === sbx.sandboxId));
	await sbx.setTimeout(600_000);
	const metrics = await sbx.getMetrics();
	assert.equal(metrics.length, 1, JSON.stringify(metrics));
	assert.ok(metrics[0].memUsed > 0 && metrics[0].memTotal >= metrics[0].memUsed && metrics[0].cpuCount >= 1, JSON.stringify(metrics));
	assert.equal(await sbx.isRunning(), true);

	step('pause and connect');
	await sbx.commands.run('echo kept > /tmp/kept');
	const counter = await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/counter; sleep 0.1; done', { background: true });
	assert.equal(await sbx.pause(), true);
	assert.equal(await sbx.isRunning(), false);
	// The pause ends the open stream of the background process at once.
	const t0 = Date.now();
	await assert.rejects(counter.wait());
	assert.ok(Date.now() - t0 < 3000, 'the stream ended ' + (Date.now() - t0) + ' ms after the pause');
	const again = await Sandbox.connect(sbx.sandboxId);
	assert.equal((await again.commands.run('cat /tmp/kept')).stdout, 'kept\n');
	assert.ok((await again.commands.list()).some((p) => p.pid === counter.pid), 'the process survived the pause');
	await again.commands.kill(counter.pid);

	step('snapshot, create from it, fork');
	await again.files.write('/tmp/snap.txt', 'in snapshot');
	const snap = await again.createSnapshot({ name: 'e2b-snap' });
	assert.match(snap.snapshotId, /^sn-/);
	const snaps = await Sandbox.listSnapshots({ sandboxId: again.sandboxId }).nextItems();
	assert.ok(snaps.some((x) => x.snapshotId === snap.snapshotId), JSON.stringify(snaps));
	const fromSnap = await Sandbox.create(snap.snapshotId);
	assert.equal(await fromSnap.files.read('/tmp/snap.txt'), 'in snapshot');
	await fromSnap.kill();
	const byName = await Sandbox.create('e2b-snap');
	assert.equal(await byName.files.read('/tmp/snap.txt'), 'in snapshot');
	await byName.kill();
	await assert.rejects(Sandbox.create('no-such-template'));
	const [forked] = await again.fork();
	assert.ok(!(forked instanceof Error), String(forked));
	assert.equal(await forked.files.read('/tmp/snap.txt'), 'in snapshot');
	await forked.kill();

	step('kill');
	assert.equal(await again.kill(), true);
	assert.equal(await Sandbox.kill(sbx.sandboxId), false);
	await assert.rejects(Sandbox.connect(sbx.sandboxId), (e) => e.name === 'SandboxNotFoundError' || /not found/i.test(e.message));

	step('code interpreter');
	const ci = await CI.Sandbox.create();
	await ci.runCode('x = 1');
	const ex = await ci.runCode('print("out"); x + 1');
	assert.equal(ex.text, '2');
	assert.deepEqual(ex.logs.stdout, ['out\n']);
	const bad = await ci.runCode('1/0');
	assert.equal(bad.error.name, 'ZeroDivisionError');
	const cx = await ci.createCodeContext();
	await ci.runCode('x = 40', { context: cx });
	assert.equal((await ci.runCode('x + 2', { context: cx })).text, '42');
	assert.equal((await ci.runCode('x')).text, '1');
	const rich = await ci.runCode('class H:\n    def _repr_html_(self): return "<b>hi</b>"\n    def __repr__(self): return "H()"\nH()');
	assert.equal(rich.text, 'H()');
	assert.equal(rich.results[0].html, '<b>hi</b>');
	assert.equal((await ci.runCode('_')).text, 'H()', 'the probe for rich forms leaves _ alone');
	const withEnv = await ci.runCode('import os; os.environ["GREETING"]', { envs: { GREETING: 'hello "there"' } });
	assert.equal(withEnv.text, "'hello \"there\"'");
	assert.equal((await ci.runCode('import os; os.environ.get("GREETING")')).text, undefined, 'envs are for one call only');
	const ctxs = await ci.listCodeContexts();
	assert.ok(ctxs.some((c) => c.id === cx.id), JSON.stringify(ctxs));
	await ci.restartCodeContext(cx);
	const gone = await ci.runCode('x', { context: cx });
	assert.equal(gone.error.name, 'NameError');
	await ci.removeCodeContext(cx);
	assert.ok(!(await ci.listCodeContexts()).some((c) => c.id === cx.id));
	const out = [];
	await ci.runCode('import sys; print("a"); print("b", file=sys.stderr)', { onStdout: (m) => out.push('out ' + m.line), onStderr: (m) => out.push('err ' + m.line) });
	assert.deepEqual(out.sort(), ['err b\n', 'out a\n']);
	await ci.kill();
	`)
}

// connectFrames splits a Connect streaming body into its envelopes.
func connectFrames(t *testing.T, body []byte) (flags []byte, msgs []string) {
	t.Helper()
	for len(body) > 0 {
		if len(body) < 5 {
			t.Fatalf("truncated envelope header: % x", body)
		}
		n := binary.BigEndian.Uint32(body[1:5])
		if uint32(len(body)-5) < n {
			t.Fatalf("truncated envelope: want %d bytes, have %d", n, len(body)-5)
		}
		flags = append(flags, body[0])
		msgs = append(msgs, string(body[5:5+n]))
		body = body[5+n:]
	}
	return flags, msgs
}

func envelope(v any) []byte {
	b, _ := json.Marshal(v)
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// TestE2BConnectFraming checks the wire format of the envd Connect calls
// and of the control plane's errors against a real server, byte for byte
// where the SDK is strict.
func TestE2BConnectFraming(t *testing.T) {
	RequiresRoot(t)
	s := StartServer(t)
	key := e2bAPIKey(t, s)
	base := "http://" + s.Addr
	do := func(method, path string, h map[string]string, body []byte) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	apiHdr := map[string]string{"X-API-KEY": key, "Content-Type": "application/json"}

	// Control plane errors carry the status as a JSON code.
	resp, b := do("GET", "/sandboxes/sb-doesnotexist", apiHdr, nil)
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"code":404`) {
		t.Fatalf("get unknown sandbox: got %d %s, want 404 with code 404", resp.StatusCode, b)
	}
	resp, b = do("POST", "/v2/sandboxes", map[string]string{"X-API-KEY": "wrong"}, []byte(`{"templateID":"base"}`))
	if resp.StatusCode != 401 || !strings.Contains(string(b), `"code":401`) {
		t.Fatalf("create with a bad key: got %d %s, want 401 with code 401", resp.StatusCode, b)
	}

	resp, b = do("POST", "/v2/sandboxes", apiHdr, []byte(`{"templateID":"base","metadata":{"who":"framing"}}`))
	if resp.StatusCode != 201 {
		t.Fatalf("create: got %d %s, want 201", resp.StatusCode, b)
	}
	var sbx struct {
		SandboxID, EnvdVersion, EnvdAccessToken string
	}
	if err := json.Unmarshal(b, &sbx); err != nil || sbx.SandboxID == "" || sbx.EnvdAccessToken == "" {
		t.Fatalf("create answered %s (%v)", b, err)
	}
	envd := map[string]string{"E2b-Sandbox-Id": sbx.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sbx.EnvdAccessToken}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}

	resp, b = do("GET", "/health", envd, nil)
	if resp.StatusCode != 204 {
		t.Fatalf("health: got %d %s, want 204", resp.StatusCode, b)
	}
	resp, b = do("GET", "/health", with(envd, "X-Access-Token", "k.bad"), nil)
	if resp.StatusCode != 401 {
		t.Fatalf("health with a bad token: got %d %s, want 401", resp.StatusCode, b)
	}

	// Start: start, data, end, then the end-of-stream frame.
	start := envelope(map[string]any{"process": map[string]any{"cmd": "/bin/bash", "args": []string{"-l", "-c", "echo hi; echo err >&2; exit 7"}}, "stdin": false})
	resp, b = do("POST", "/process.Process/Start", with(envd, "Content-Type", "application/connect+json", "Connect-Protocol-Version", "1"), start)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("Start: got %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	flags, msgs := connectFrames(t, b)
	if len(msgs) < 3 || !strings.HasPrefix(msgs[0], `{"event":{"start":{"pid":`) {
		t.Fatalf("Start: first frame %q of %q, want the start event", msgs[0], msgs)
	}
	last := len(msgs) - 1
	if flags[last] != 0x02 || msgs[last] != "{}" {
		t.Fatalf("Start: last frame flags %#x %q, want 0x02 {}", flags[last], msgs[last])
	}
	if want := `{"event":{"end":{"exitCode":7,"exited":true,"status":"exit status 7"}}}`; msgs[last-1] != want {
		t.Fatalf("Start: end frame %q, want %q", msgs[last-1], want)
	}
	var stdout, stderr string
	for i, m := range msgs[1 : last-1] {
		if flags[i+1] != 0 {
			t.Fatalf("data frame %d has flags %#x", i, flags[i+1])
		}
		var ev struct {
			Event struct {
				Data struct{ Stdout, Stderr []byte }
			}
		}
		if err := json.Unmarshal([]byte(m), &ev); err != nil {
			t.Fatalf("data frame %q: %v", m, err)
		}
		stdout += string(ev.Event.Data.Stdout)
		stderr += string(ev.Event.Data.Stderr)
	}
	if stdout != "hi\n" || stderr != "err\n" {
		t.Fatalf("Start output: got %q %q, want %q %q", stdout, stderr, "hi\n", "err\n")
	}

	// A process whose client went away runs on, and is forgotten once it
	// has ended; one that was followed to its end is forgotten at once.
	req, _ := http.NewRequest("POST", base+"/process.Process/Start", bytes.NewReader(envelope(map[string]any{
		"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", "sleep 1; echo done > /tmp/left"}}})))
	for k, v := range with(envd, "Content-Type", "application/connect+json") {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [5]byte
	io.ReadFull(resp.Body, hdr[:]) // the start event is out: the process runs
	resp.Body.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		jobs, err := s.Client.ListJobs(ctxT(t), sbx.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs still kept 20s after their processes ended: %+v", jobs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, b = do("GET", "/files?path=/tmp/left", envd, nil); string(b) != "done\n" {
		t.Fatalf("the process whose client went away did not finish: /tmp/left is %q", b)
	}

	// A streaming call that fails does so in the end-of-stream frame.
	resp, b = do("POST", "/process.Process/Connect", with(envd, "Content-Type", "application/connect+json"), envelope(map[string]any{"process": map[string]any{"pid": 999999}}))
	flags, msgs = connectFrames(t, b)
	if resp.StatusCode != 200 || len(msgs) != 1 || flags[0] != 0x02 || !strings.Contains(msgs[0], `"code":"not_found"`) {
		t.Fatalf("Connect to no process: got %d %v %q, want one end frame with not_found", resp.StatusCode, flags, msgs)
	}

	// Unary errors: non-200 with a Connect code.
	unary := with(envd, "Content-Type", "application/json", "Connect-Protocol-Version", "1")
	resp, b = do("POST", "/filesystem.Filesystem/Stat", unary, []byte(`{"path":"/nope"}`))
	if resp.StatusCode != 404 || !strings.Contains(string(b), `"code":"not_found"`) {
		t.Fatalf("Stat missing: got %d %s, want 404 not_found", resp.StatusCode, b)
	}
	resp, b = do("POST", "/filesystem.Filesystem/MakeDir", unary, []byte(`{"path":"/tmp"}`))
	if resp.StatusCode != 409 || !strings.Contains(string(b), `"code":"already_exists"`) {
		t.Fatalf("MakeDir existing: got %d %s, want 409 already_exists", resp.StatusCode, b)
	}
	resp, b = do("POST", "/filesystem.Filesystem/Stat", unary, []byte(`{"path":"/tmp"}`))
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"type":"FILE_TYPE_DIRECTORY"`) {
		t.Fatalf("Stat /tmp: got %d %s", resp.StatusCode, b)
	}

	// Files: octet-stream upload, then a read.
	resp, b = do("POST", "/files?path=/tmp/raw.bin", with(envd, "Content-Type", "application/octet-stream"), []byte("raw bytes"))
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"path":"/tmp/raw.bin"`) {
		t.Fatalf("octet-stream upload: got %d %s", resp.StatusCode, b)
	}
	if _, b = do("GET", "/files?path=/tmp/raw.bin", envd, nil); string(b) != "raw bytes" {
		t.Fatalf("read back: got %q", b)
	}
	resp, b = do("GET", "/files?path=/tmp/none", envd, nil)
	if resp.StatusCode != 404 {
		t.Fatalf("read a missing file: got %d %s, want 404", resp.StatusCode, b)
	}

	// The timeout is the idle policy: pause, or delete when asked.
	var extra []string
	for _, c := range []struct {
		body string
		idle api.IdlePolicy
	}{
		{`{"templateID":"base","timeout":123}`, api.IdlePolicy{TimeoutS: 123, Action: "pause"}},
		{`{"templateID":"base","timeout":45,"autoPause":false}`, api.IdlePolicy{TimeoutS: 45, Action: "delete"}},
	} {
		resp, b = do("POST", "/v2/sandboxes", apiHdr, []byte(c.body))
		var made struct{ SandboxID string }
		if json.Unmarshal(b, &made); resp.StatusCode != 201 {
			t.Fatalf("create %s: got %d %s", c.body, resp.StatusCode, b)
		}
		got, err := s.Client.GetSandbox(ctxT(t), made.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Idle != c.idle {
			t.Errorf("create %s: idle policy %+v, want %+v", c.body, got.Idle, c.idle)
		}
		extra = append(extra, made.SandboxID)
	}

	// Pages of one: nextToken walks the three sandboxes, each once.
	seen := map[string]int{}
	token := ""
	for page := 0; ; page++ {
		q := "/v2/sandboxes?limit=1"
		if token != "" {
			q += "&nextToken=" + token
		}
		resp, b = do("GET", q, apiHdr, nil)
		var items []struct{ SandboxID string }
		if err := json.Unmarshal(b, &items); err != nil || resp.StatusCode != 200 || len(items) != 1 {
			t.Fatalf("list page %d: got %d %s", page, resp.StatusCode, b)
		}
		seen[items[0].SandboxID]++
		if token = resp.Header.Get("X-Next-Token"); token == "" {
			break
		}
		if page == 10 {
			t.Fatalf("list pages do not end: seen %v", seen)
		}
	}
	if len(seen) != 3 || seen[sbx.SandboxID] != 1 {
		t.Errorf("list pages: saw %v, want 3 sandboxes once each", seen)
	}
	for _, id := range extra {
		do("DELETE", "/sandboxes/"+id, apiHdr, nil)
	}

	// Network: E2B's allow/deny lists as Warren egress policies.
	resp, b = do("PUT", "/sandboxes/"+sbx.SandboxID+"/network", apiHdr, []byte(`{"denyOut":["0.0.0.0/0"],"allowOut":["1.1.1.1/32","example.com"]}`))
	if resp.StatusCode != 204 {
		t.Fatalf("update network: got %d %s", resp.StatusCode, b)
	}
	got, err := s.Client.GetSandbox(ctxT(t), sbx.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if g := fmt.Sprint(got.Network.Egress); g != "[1.1.1.1/32 example.com]" {
		t.Errorf("egress after update: got %s, want [1.1.1.1/32 example.com]", g)
	}
	resp, b = do("PUT", "/sandboxes/"+sbx.SandboxID+"/network", apiHdr, []byte(`{"denyOut":["10.0.0.0/8"]}`))
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"code":400`) {
		t.Errorf("a deny list: got %d %s, want 400", resp.StatusCode, b)
	}

	// Pause: 204, then 409 with code 409; the gateway answers 502.
	resp, b = do("POST", fmt.Sprintf("/sandboxes/%s/pause", sbx.SandboxID), apiHdr, nil)
	if resp.StatusCode != 204 {
		t.Fatalf("pause: got %d %s", resp.StatusCode, b)
	}
	resp, b = do("POST", fmt.Sprintf("/sandboxes/%s/pause", sbx.SandboxID), apiHdr, nil)
	if resp.StatusCode != 409 || !strings.Contains(string(b), `"code":409`) {
		t.Fatalf("pause a paused sandbox: got %d %s, want 409", resp.StatusCode, b)
	}
	if resp, b = do("GET", "/health", envd, nil); resp.StatusCode != 502 {
		t.Fatalf("health of a paused sandbox: got %d %s, want 502", resp.StatusCode, b)
	}
	resp, b = do("GET", "/v2/sandboxes?state=paused&metadata=who%3Dframing", apiHdr, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(b), sbx.SandboxID) {
		t.Fatalf("list paused with metadata: got %d %s", resp.StatusCode, b)
	}
	if _, b = do("GET", "/v2/sandboxes?state=running", apiHdr, nil); strings.Contains(string(b), sbx.SandboxID) {
		t.Fatalf("list running shows the paused sandbox: %s", b)
	}
	// Another team sees none of it, and a token is for its sandbox only.
	other := map[string]string{"X-API-KEY": newTeam(t, s, "e2b-other"), "Content-Type": "application/json"}
	for _, c := range []struct{ method, path string }{
		{"GET", "/sandboxes/" + sbx.SandboxID}, {"DELETE", "/sandboxes/" + sbx.SandboxID},
		{"POST", "/v2/sandboxes/" + sbx.SandboxID + "/connect"}, {"POST", "/sandboxes/" + sbx.SandboxID + "/timeout"},
	} {
		resp, b = do(c.method, c.path, other, []byte(`{}`))
		if resp.StatusCode != 404 || !strings.Contains(string(b), `"code":404`) {
			t.Errorf("%s %s with another team's key: got %d %s, want 404", c.method, c.path, resp.StatusCode, b)
		}
	}
	if _, b = do("GET", "/v2/sandboxes", other, nil); strings.Contains(string(b), sbx.SandboxID) {
		t.Errorf("another team's list shows the sandbox: %s", b)
	}
	resp, b = do("POST", "/v2/sandboxes", other, []byte(`{}`))
	if resp.StatusCode != 201 {
		t.Fatalf("create as another team: got %d %s", resp.StatusCode, b)
	}
	var theirs struct{ SandboxID string }
	json.Unmarshal(b, &theirs)
	if resp, b = do("GET", "/health", with(envd, "E2b-Sandbox-Id", theirs.SandboxID), nil); resp.StatusCode != 401 {
		t.Errorf("a token of one sandbox used for another: got %d %s, want 401", resp.StatusCode, b)
	}

	resp, b = do("DELETE", "/sandboxes/"+sbx.SandboxID, apiHdr, nil)
	if resp.StatusCode != 204 {
		t.Fatalf("kill: got %d %s", resp.StatusCode, b)
	}
}
