package e2b

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

func TestWants(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		header map[string]string
		want   bool
	}{
		{"envd", "/process.Process/Start", map[string]string{"E2b-Sandbox-Id": "sb-1"}, true},
		{"control plane", "/v2/sandboxes", map[string]string{"X-API-KEY": "k"}, true},
		{"warren api", "/v1/sandboxes", map[string]string{"Authorization": "Bearer k"}, false},
		{"warren api with both", "/v2/sandboxes", map[string]string{"X-API-KEY": "k", "Authorization": "Bearer k"}, false},
		{"warren path with an api key", "/v1/sandboxes", map[string]string{"X-API-KEY": "k"}, false},
		{"healthz", "/healthz", map[string]string{"X-API-KEY": "k"}, false},
		{"nothing", "/sandboxes", nil, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", tt.path, nil)
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		if got := Wants(r); got != tt.want {
			t.Errorf("%s: Wants = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// frames splits a Connect streaming body into flags and messages.
func frames(t *testing.T, b []byte) (flags []byte, msgs []string) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("truncated envelope header % x", b)
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if uint32(len(b)-5) < n {
			t.Fatalf("truncated envelope: %d bytes of %d", len(b)-5, n)
		}
		flags, msgs = append(flags, b[0]), append(msgs, string(b[5:5+n]))
		b = b[5+n:]
	}
	return flags, msgs
}

func TestStreamFrames(t *testing.T) {
	rec := httptest.NewRecorder()
	s := newStream(rec)
	if err := s.send(eventMessage{Event: processEvent{Start: &startEvent{PID: 7}}}); err != nil {
		t.Fatal(err)
	}
	s.send(eventMessage{Event: processEvent{Data: &dataEvent{Stdout: []byte("hi\n")}}})
	s.end(nil)
	s.send(eventMessage{}) // after the end: dropped
	if got := rec.Header().Get("Content-Type"); got != "application/connect+json" {
		t.Errorf("content type: got %q, want application/connect+json", got)
	}
	flags, msgs := frames(t, rec.Body.Bytes())
	want := []string{`{"event":{"start":{"pid":7}}}`, `{"event":{"data":{"stdout":"aGkK"}}}`, `{}`}
	if !reflect.DeepEqual(msgs, want) || !bytes.Equal(flags, []byte{0, 0, 2}) {
		t.Errorf("got %v %q, want [0 0 2] %q", flags, msgs, want)
	}

	rec = httptest.NewRecorder()
	streamError(rec, fmt.Errorf("no such process: %w", api.ErrNotFound))
	flags, msgs = frames(t, rec.Body.Bytes())
	if rec.Code != 200 || len(msgs) != 1 || flags[0] != 2 ||
		msgs[0] != `{"error":{"code":"not_found","message":"no such process: not found"}}` {
		t.Errorf("stream error: got %d %v %q", rec.Code, flags, msgs)
	}
}

func envelopeOf(flags byte, body string) []byte {
	b := make([]byte, 5, 5+len(body))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(body)))
	return append(b, body...)
}

func TestReadEnvelope(t *testing.T) {
	tests := []struct {
		name string
		body []byte
		code string // "" for success
	}{
		{"ok", envelopeOf(0, `{"path":"/tmp"}`), ""},
		{"compressed", envelopeOf(1, `{"path":"/tmp"}`), "unimplemented"},
		{"truncated", envelopeOf(0, `{"path":"/tmp"}`)[:10], "invalid_argument"},
		{"not json", envelopeOf(0, `{path`), "invalid_argument"},
		{"empty", nil, "invalid_argument"},
	}
	for _, tt := range tests {
		var req pathRequest
		err := readEnvelope(httptest.NewRequest("POST", "/", bytes.NewReader(tt.body)), &req)
		var ce *connectError
		switch {
		case tt.code == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.code == "" && req.Path != "/tmp":
			t.Errorf("%s: path %q, want /tmp", tt.name, req.Path)
		case tt.code != "" && (!errors.As(err, &ce) || ce.Code != tt.code):
			t.Errorf("%s: got %v, want code %s", tt.name, err, tt.code)
		}
	}
}

func TestUnaryErrors(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("x: %w", api.ErrNotFound), 404, "not_found"},
		{&connectError{Code: "already_exists", Message: "x"}, 409, "already_exists"},
		{fmt.Errorf("x: %w", api.ErrUnavailable), 503, "unavailable"},
		{fmt.Errorf("x: %w", api.ErrInvalid), 400, "invalid_argument"},
		{errUnimplemented("x"), 501, "unimplemented"},
		{errors.New("boom"), 500, "internal"},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		writeUnaryError(rec, tt.err)
		var body connectError
		json.Unmarshal(rec.Body.Bytes(), &body)
		if rec.Code != tt.status || body.Code != tt.code {
			t.Errorf("%v: got %d %q, want %d %q", tt.err, rec.Code, body.Code, tt.status, tt.code)
		}
	}
}

type fakeKeys map[string]store.KeyInfo // by id

func (f fakeKeys) KeyByHash(_ context.Context, hash string) (store.Key, error) {
	for _, k := range f {
		if k.Hash == hash && k.RevokedAt == nil {
			return k.Key, nil
		}
	}
	return store.Key{}, api.ErrNotFound
}

func (f fakeKeys) GetKey(_ context.Context, id string) (store.KeyInfo, error) {
	if k, ok := f[id]; ok {
		return k, nil
	}
	return store.KeyInfo{}, fmt.Errorf("key %s: %w", id, api.ErrNotFound)
}

func TestAccessTokens(t *testing.T) {
	now := time.Now()
	keys := fakeKeys{
		"k1": {Key: store.Key{ID: "k1", TeamID: "team-a", Hash: hashKey("secret-1")}},
		"k2": {Key: store.Key{ID: "k2", TeamID: "team-b", Hash: hashKey("secret-2"), RevokedAt: &now}},
	}
	h := &Handler{keys: keys, log: slog.Default()}
	good := accessToken(keys["k1"].Key, "sb-1")
	tests := []struct {
		name, sandbox, header, token string
		team                         string // "" for unauthorized
	}{
		{"valid", "sb-1", headerAccessToken, good, "team-a"},
		{"traffic header", "sb-1", headerTraffic, good, "team-a"},
		{"other sandbox", "sb-2", headerAccessToken, good, ""},
		{"revoked key", "sb-1", headerAccessToken, accessToken(keys["k2"].Key, "sb-1"), ""},
		{"unknown key", "sb-1", headerAccessToken, "k9." + strings.Repeat("0", 32), ""},
		{"malformed", "sb-1", headerAccessToken, "nodot", ""},
		{"missing", "sb-1", "", "", ""},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/health", nil)
		if tt.header != "" {
			r.Header.Set(tt.header, tt.token)
		}
		team, err := h.sandboxCaller(context.Background(), r, tt.sandbox)
		if tt.team != "" && (err != nil || team != tt.team) {
			t.Errorf("%s: got %q %v, want %q", tt.name, team, err, tt.team)
		}
		if tt.team == "" && !errors.Is(err, api.ErrUnauthorized) {
			t.Errorf("%s: got %q %v, want unauthorized", tt.name, team, err)
		}
	}

	r := httptest.NewRequest("GET", "/v2/sandboxes", nil)
	r.Header.Set(headerAPIKey, "secret-1")
	if k, err := h.apiCaller(r); err != nil || k.TeamID != "team-a" {
		t.Errorf("API key: got %v %v, want team-a", k, err)
	}
	r.Header.Set(headerAPIKey, "secret-2")
	if _, err := h.apiCaller(r); !errors.Is(err, api.ErrUnauthorized) {
		t.Errorf("revoked API key: got %v, want unauthorized", err)
	}
}

func TestToEntry(t *testing.T) {
	mt := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		in        api.FileEntry
		typ, perm string
		mode      uint32
	}{
		{api.FileEntry{Name: "a", Path: "/a", Type: "file", Size: 3, Mode: "0644", ModTime: mt}, "FILE_TYPE_FILE", "-rw-r--r--", 0o644},
		{api.FileEntry{Name: "d", Path: "/d", Type: "dir", Mode: "0755", ModTime: mt}, "FILE_TYPE_DIRECTORY", "drwxr-xr-x", 0o755},
		{api.FileEntry{Name: "l", Path: "/l", Type: "symlink", Mode: "0777", Target: "/a", ModTime: mt}, "FILE_TYPE_SYMLINK", "Lrwxrwxrwx", 0o777},
	}
	for _, tt := range tests {
		got := toEntry(tt.in)
		if got.Type != tt.typ || got.Permissions != tt.perm || got.Mode != tt.mode || got.Size != fmt.Sprint(tt.in.Size) {
			t.Errorf("%s: got %+v, want %s %s %o", tt.in.Name, got, tt.typ, tt.perm, tt.mode)
		}
	}
	b, _ := json.Marshal(toEntry(tests[0].in))
	if !strings.Contains(string(b), `"size":"3"`) || !strings.Contains(string(b), `"modifiedTime":"2026-12-02T10:00:00Z"`) {
		t.Errorf("proto3 JSON of an entry: %s", b)
	}
}

func TestEgress(t *testing.T) {
	no, yes := false, true
	tests := []struct {
		in      networkJSON
		want    any
		invalid bool
	}{
		{networkJSON{}, "open", false},
		{networkJSON{AllowInet: &yes}, "open", false},
		{networkJSON{AllowInet: &no}, "none", false},
		{networkJSON{DenyOut: []string{allTraffic}}, "none", false},
		{networkJSON{DenyOut: []string{allTraffic}, AllowOut: []string{"1.1.1.1", "pypi.org"}}, []string{"1.1.1.1", "pypi.org"}, false},
		{networkJSON{AllowInet: &no, AllowOut: []string{"pypi.org"}}, []string{"pypi.org"}, false},
		{networkJSON{DenyOut: []string{"10.0.0.0/8"}}, nil, true},
	}
	for _, tt := range tests {
		got, err := tt.in.egress()
		if tt.invalid {
			if !errors.Is(err, api.ErrInvalid) {
				t.Errorf("%+v: got %v %v, want invalid", tt.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%+v: got %v %v, want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestFollowers(t *testing.T) {
	var f followers
	a, b := f.add("j"), f.add("j")
	if a() {
		t.Errorf("the first of two followers reports it was the last")
	}
	if a() {
		t.Errorf("a second call of the same follower counted again")
	}
	if !b() {
		t.Errorf("the last follower does not report it")
	}
}

func TestStreamsStop(t *testing.T) {
	var s streamSet
	ctx1, done1 := s.track(context.Background(), "sb-1")
	ctx2, done2 := s.track(context.Background(), "sb-2")
	defer done2()
	s.stop("sb-1")
	if stoppedErr(ctx1, "sb-1") == nil {
		t.Errorf("a stream of a stopped sandbox is not ended")
	}
	if ctx2.Err() != nil {
		t.Errorf("a stream of another sandbox was ended")
	}
	done1()
	_, done3 := s.track(context.Background(), "sb-3")
	done3()
	if len(s.m) != 1 {
		t.Errorf("streams left tracked: %v, want only sb-2's", s.m)
	}
	r := httptest.NewRequest("GET", "/", nil)
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	if stoppedErr(ctx, "sb-1") != nil {
		t.Errorf("a client that went away reads as a stopped sandbox")
	}
}
