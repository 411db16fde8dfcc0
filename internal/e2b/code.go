package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
)

// The code interpreter (port 49999) is served with the agent's code
// contexts: persistent Python interpreters. An E2B context id is a Warren
// context name.

type executeRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id"`
	Language  string            `json:"language"`
	EnvVars   map[string]string `json:"env_vars"`
}

type contextJSON struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

func (h *Handler) serveCode(w http.ResponseWriter, r *http.Request, id string) {
	team, err := h.sandboxCaller(r.Context(), r, id)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	c, err := h.m.Agent(r.Context(), team, id)
	if err != nil {
		if errors.Is(err, api.ErrConflict) {
			http.Error(w, err.Error(), http.StatusBadGateway) // the SDK's TimeoutError
			return
		}
		h.writeError(w, r, err)
		return
	}
	defer h.m.Begin(id)()
	call := &sandboxCall{id: id, team: team, agent: c}
	p := r.URL.Path
	switch {
	case p == "/health":
		w.WriteHeader(http.StatusOK)
		return
	case p == "/execute" && r.Method == http.MethodPost:
		err = h.execute(w, r, call)
	case p == "/contexts" && r.Method == http.MethodPost:
		err = h.createContext(w, r, call)
	case p == "/contexts" && r.Method == http.MethodGet:
		err = h.listContexts(w, r, call)
	case strings.HasPrefix(p, "/contexts/") && r.Method == http.MethodDelete:
		err = c.DeleteContext(r.Context(), strings.TrimPrefix(p, "/contexts/"))
		if err == nil {
			w.WriteHeader(http.StatusNoContent)
		}
	case strings.HasPrefix(p, "/contexts/") && strings.HasSuffix(p, "/restart") && r.Method == http.MethodPost:
		_, err = c.RestartContext(r.Context(), strings.TrimSuffix(strings.TrimPrefix(p, "/contexts/"), "/restart"))
		if err == nil {
			w.WriteHeader(http.StatusNoContent)
		}
	default:
		err = fmt.Errorf("Warren's code interpreter does not serve %s %s: %w", r.Method, p, api.ErrNotFound)
	}
	if err != nil {
		h.writeError(w, r, err)
	}
}

func (h *Handler) execute(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	var req executeRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.ContextID != "" && req.Language != "" {
		return fmt.Errorf("set context_id or language, not both: %w", api.ErrInvalid)
	}
	switch strings.ToLower(req.Language) {
	case "", "python", "python3":
	default:
		return fmt.Errorf("language %q: Warren's code contexts run Python: %w", req.Language, api.ErrInvalid)
	}
	if len(req.EnvVars) > 0 {
		// For this call only: set before, put back after, each by a
		// call of statements, which leaves _ alone.
		env, _ := json.Marshal(req.EnvVars)
		set := fmt.Sprintf(envSet, strconv.Quote(string(env)))
		if res, err := c.agent.RunCode(r.Context(), api.CodeRequest{Code: set, Context: req.ContextID, TimeoutS: 10}); err != nil {
			return err
		} else if res.Error != nil {
			return fmt.Errorf("setting env_vars: %s: %s: %w", res.Error.Name, res.Error.Value, api.ErrInvalid)
		}
		defer func() {
			ctx := context.WithoutCancel(r.Context())
			if _, err := c.agent.RunCode(ctx, api.CodeRequest{Code: envRestore, Context: req.ContextID, TimeoutS: 10}); err != nil {
				h.log.Warn("restoring a code context's environment", "sandbox_id", c.id, "err", err)
			}
		}()
	}
	res, err := c.agent.RunCode(r.Context(), api.CodeRequest{Code: req.Code, Context: req.ContextID})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	line := func(v any) {
		b, _ := json.Marshal(v)
		w.Write(append(b, '\n'))
	}
	if res.Stdout != "" {
		line(map[string]any{"type": "stdout", "text": res.Stdout, "timestamp": now})
	}
	if res.Stderr != "" {
		line(map[string]any{"type": "stderr", "text": res.Stderr, "timestamp": now})
	}
	if res.Result != "" {
		result := map[string]any{"type": "result", "text": res.Result, "is_main_result": true}
		for k, v := range h.richForms(r, c, req.ContextID) {
			result[k] = v
		}
		line(result)
	}
	if res.Error != nil {
		line(map[string]any{"type": "error", "name": res.Error.Name, "value": res.Error.Value, "traceback": res.Error.Traceback})
	}
	line(map[string]any{"type": "number_of_executions", "execution_count": res.ExecutionCount})
	line(map[string]any{"type": "end_of_execution"})
	return nil
}

// envSet sets the variables of a JSON object (the %s, a Python string
// literal) in os.environ, keeping what they were for envRestore.
const envSet = `def __warren_env(new):
    import os, json
    new = json.loads(new)
    globals()["__warren_env_saved"] = {k: os.environ.get(k) for k in new}
    os.environ.update(new)
__warren_env(%s)
del __warren_env
`

const envRestore = `def __warren_env():
    import os
    for k, v in globals().pop("__warren_env_saved", {}).items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
__warren_env()
del __warren_env
`

// formsProbe prints, as JSON, the rich forms (IPython's _repr_*_ methods)
// of the value the last call left in _, leaving _ as it was: it ends with
// a statement, not an expression.
const formsProbe = `def __warren_forms():
    import json, base64
    v, out = _, {}
    for k in ("html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript"):
        f = getattr(v, "_repr_%s_" % k, None)
        if not callable(f):
            continue
        try:
            r = f()
        except Exception:
            continue
        if isinstance(r, tuple):
            r = r[0]
        if isinstance(r, bytes):
            r = base64.b64encode(r).decode()
        if r is not None:
            out[k] = r
    print(json.dumps(out))
__warren_forms()
del __warren_forms
`

// richForms returns the HTML, image and other forms of the value of the
// call just made in context contextID, where it has any (a DataFrame's HTML, an
// image's PNG): what Jupyter would show beside its text.
func (h *Handler) richForms(r *http.Request, c *sandboxCall, contextID string) map[string]any {
	res, err := c.agent.RunCode(r.Context(), api.CodeRequest{Code: formsProbe, Context: contextID, TimeoutS: 10})
	if err != nil || res.Error != nil {
		return nil
	}
	var forms map[string]any
	if json.Unmarshal([]byte(res.Stdout), &forms) != nil {
		return nil
	}
	return forms
}

func toContext(cc api.CodeContext) contextJSON {
	return contextJSON{ID: cc.Name, Language: cc.Language, Cwd: cc.Cwd}
}

func (h *Handler) createContext(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	var req struct {
		Language string `json:"language"`
		Cwd      string `json:"cwd"`
	}
	if err := decode(r, &req); err != nil {
		return err
	}
	name := "ctx-" + sandbox.NewID()[3:]
	cc, err := c.agent.CreateContext(r.Context(), api.CreateContextRequest{Name: name, Language: req.Language, Cwd: req.Cwd})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toContext(cc))
	return nil
}

func (h *Handler) listContexts(w http.ResponseWriter, r *http.Request, c *sandboxCall) error {
	ccs, err := c.agent.Contexts(r.Context())
	if err != nil {
		return err
	}
	out := make([]contextJSON, 0, len(ccs))
	for _, cc := range ccs {
		out = append(out, toContext(cc))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
