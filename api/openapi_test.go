package api

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// route is one METHOD and path pattern, as OpenAPI spells the path.
type route struct{ method, path string }

func (r route) String() string { return r.method + " " + r.path }

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// routePattern finds registrations like s.handle("GET /v1/x", ...) and
// s.mux.HandleFunc("POST /v1/y", ...), and those of any other helper of the
// Server called the same way.
var routePattern = regexp.MustCompile(`\bs\.(?:mux\.)?\w+\(\s*"([A-Z]+) (/[^"]*)"`)

// wildcardRest matches a {name...} wildcard, which OpenAPI writes {name}.
var wildcardRest = regexp.MustCompile(`\{([A-Za-z_][A-Za-z0-9_]*)\.\.\.\}`)

// serverRoutes parses the routes registered in the Go sources of dir.
func serverRoutes(t *testing.T, dir string) []route {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []route
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range routePattern.FindAllStringSubmatch(string(src), -1) {
			out = append(out, route{method: m[1], path: openAPIPath(m[2])})
		}
	}
	return out
}

// openAPIPath converts a net/http pattern path to an OpenAPI path.
func openAPIPath(p string) string {
	p = wildcardRest.ReplaceAllString(p, "{$1}")
	if strings.HasSuffix(p, "/{$}") {
		p = strings.TrimSuffix(p, "{$}")
	}
	return p
}

type spec struct {
	root  map[string]any
	paths map[string]any
}

func loadSpec(t *testing.T) spec {
	t.Helper()
	b, err := os.ReadFile("openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := yaml.Unmarshal(b, &root); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	if got, ok := root["openapi"].(string); !ok || !strings.HasPrefix(got, "3.1.") {
		t.Fatalf("openapi: got %v, want 3.1.x", root["openapi"])
	}
	paths, ok := root["paths"].(map[string]any)
	if !ok || len(paths) == 0 {
		t.Fatal("openapi.yaml has no paths")
	}
	return spec{root: root, paths: paths}
}

// routes lists every operation of the spec.
func (s spec) routes() []route {
	var out []route
	for p, item := range s.paths {
		ops, _ := item.(map[string]any)
		for m := range ops {
			if slices.Contains(httpMethods, m) {
				out = append(out, route{method: strings.ToUpper(m), path: p})
			}
		}
	}
	return out
}

// missing returns the routes of want that have is missing.
func missing(want, have []route) []route {
	var out []route
	for _, r := range want {
		if !slices.Contains(have, r) {
			out = append(out, r)
		}
	}
	return out
}

// TestOpenAPICoversServer fails when the server registers a route that
// openapi.yaml does not describe, or openapi.yaml describes one the server
// does not serve: the spec says exactly what the server serves.
func TestOpenAPICoversServer(t *testing.T) {
	sp := loadSpec(t)
	served := serverRoutes(t, filepath.Join("..", "internal", "server"))
	// The parser must keep finding routes, or this test proves nothing.
	for _, r := range []route{{"GET", "/healthz"}, {"POST", "/v1/sandboxes"}, {"DELETE", "/v1/images/{name}"}} {
		if !slices.Contains(served, r) {
			t.Fatalf("route %v not found in internal/server; has the way routes are registered changed? (found %v)", r, served)
		}
	}
	described := sp.routes()
	for _, r := range missing(served, described) {
		t.Errorf("internal/server serves %v, but api/openapi.yaml does not describe it", r)
	}
	for _, r := range missing(described, served) {
		t.Errorf("api/openapi.yaml describes %v, but internal/server does not serve it", r)
	}
}

// TestMissingRoutesDetected makes sure the comparison above can fail.
func TestMissingRoutesDetected(t *testing.T) {
	sp := loadSpec(t)
	served := []route{{"GET", "/healthz"}, {"PATCH", "/v1/sandboxes/{id}"}, {"GET", "/v1/nothing"}}
	got := fmt.Sprint(missing(served, sp.routes()))
	want := "[PATCH /v1/sandboxes/{id} GET /v1/nothing]"
	if got != want {
		t.Errorf("missing: got %v, want %v", got, want)
	}
}

func TestOpenAPIPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/v1/sandboxes", "/v1/sandboxes"},
		{"/v1/sandboxes/{id}", "/v1/sandboxes/{id}"},
		{"/v1/images/{name...}", "/v1/images/{name}"},
		{"/v1/sandboxes/{id}/ports/{port}/{rest...}", "/v1/sandboxes/{id}/ports/{port}/{rest}"},
		{"/v1/things/{$}", "/v1/things/"},
	}
	for _, tt := range tests {
		if got := openAPIPath(tt.in); got != tt.want {
			t.Errorf("openAPIPath(%q): got %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestRoutePattern(t *testing.T) {
	src := `
	s.mux.HandleFunc("GET /healthz", s.handleHealth)
	s.handle("POST /v1/sandboxes", s.createSandbox)
	s.handleInside("DELETE /v1/sandboxes/{id}/shells/{name}", s.deleteShell)
	s.mux.HandleFunc("/", notFound)
	log.Info("GET /v1/not-a-route")
`
	var got []string
	for _, m := range routePattern.FindAllStringSubmatch(src, -1) {
		got = append(got, m[1]+" "+m[2])
	}
	want := []string{"GET /healthz", "POST /v1/sandboxes", "DELETE /v1/sandboxes/{id}/shells/{name}"}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// resolve follows a local $ref ("#/components/...").
func (s spec) resolve(t *testing.T, ref string) any {
	t.Helper()
	if !strings.HasPrefix(ref, "#/") {
		t.Errorf("$ref %q: only local references are used", ref)
		return nil
	}
	var cur any = s.root
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			t.Errorf("$ref %q does not resolve", ref)
			return nil
		}
		if cur, ok = m[part]; !ok {
			t.Errorf("$ref %q does not resolve", ref)
			return nil
		}
	}
	return cur
}

// deref returns v, or what it refers to when it is a $ref.
func (s spec) deref(t *testing.T, v any) map[string]any {
	t.Helper()
	m, _ := v.(map[string]any)
	if ref, ok := m["$ref"].(string); ok {
		m, _ = s.resolve(t, ref).(map[string]any)
	}
	return m
}

func TestOpenAPIRefsResolve(t *testing.T) {
	sp := loadSpec(t)
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				sp.resolve(t, ref)
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(sp.root)
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// TestOpenAPIOperations checks each operation: a unique operationId, its
// path parameters declared, a 401 unless it needs no key, and every error
// answer an ErrorBody.
func TestOpenAPIOperations(t *testing.T) {
	sp := loadSpec(t)
	ids := map[string]string{}
	for _, r := range sp.routes() {
		item := sp.paths[r.path].(map[string]any)
		op := item[strings.ToLower(r.method)].(map[string]any)

		id, _ := op["operationId"].(string)
		if id == "" {
			t.Errorf("%v: no operationId", r)
		} else if prev, dup := ids[id]; dup {
			t.Errorf("%v: operationId %q already used by %v", r, id, prev)
		}
		ids[id] = r.String()

		declared := map[string]bool{}
		for _, list := range []any{item["parameters"], op["parameters"]} {
			ps, _ := list.([]any)
			for _, p := range ps {
				pm := sp.deref(t, p)
				if pm["in"] == "path" {
					declared[fmt.Sprint(pm["name"])] = true
				}
			}
		}
		for _, m := range pathParam.FindAllStringSubmatch(r.path, -1) {
			if !declared[m[1]] {
				t.Errorf("%v: path parameter %q is not declared", r, m[1])
			}
		}

		responses, _ := op["responses"].(map[string]any)
		if len(responses) == 0 {
			t.Errorf("%v: no responses", r)
		}
		sec, hasSec := op["security"].([]any)
		public := hasSec && len(sec) == 0
		if _, ok := responses["401"]; !public && !ok {
			t.Errorf("%v needs a key but does not list 401", r)
		}
		for status, resp := range responses {
			if status < "400" {
				continue
			}
			content, _ := sp.deref(t, resp)["content"].(map[string]any)
			media, _ := content["application/json"].(map[string]any)
			schema, _ := media["schema"].(map[string]any)
			if got := schema["$ref"]; got != "#/components/schemas/ErrorBody" {
				t.Errorf("%v %s: schema got %v, want an ErrorBody", r, status, got)
			}
		}
	}
}

// TestOpenAPIErrorCodes checks that the ErrorDetail code enum is exactly the
// codes of this package.
func TestOpenAPIErrorCodes(t *testing.T) {
	sp := loadSpec(t)
	detail := sp.resolve(t, "#/components/schemas/ErrorDetail").(map[string]any)
	code := detail["properties"].(map[string]any)["code"].(map[string]any)
	var got []string
	for _, c := range code["enum"].([]any) {
		got = append(got, fmt.Sprint(c))
	}
	var want []string
	for _, ce := range codeErrors {
		want = append(want, ce.code)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ErrorDetail.code enum: got %v, want %v", got, want)
	}
}
