package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/warrenhq/warren/api"
)

var codeStatus = map[string]int{
	api.CodeInvalid:      http.StatusBadRequest,
	api.CodeUnauthorized: http.StatusUnauthorized,
	api.CodeForbidden:    http.StatusForbidden,
	api.CodeNotFound:     http.StatusNotFound,
	api.CodeConflict:     http.StatusConflict,
	api.CodeQuota:        http.StatusTooManyRequests,
	api.CodeUnavailable:  http.StatusServiceUnavailable,
	api.CodeInternal:     http.StatusInternalServerError,
}

// writeError answers err with the status its sentinel maps to. Internal
// errors are logged with the request; their message still goes to the
// client, since it is what the person at the other end needs to act.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	code := api.CodeForError(err)
	status := codeStatus[code]
	if status >= 500 {
		log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	var qe *api.QuotaError
	if errors.As(err, &qe) {
		// Which quota, and the figures, for programs to act on.
		writeJSON(w, status, api.QuotaErrorBody{Error: api.QuotaErrorDetail{
			ErrorDetail: api.ErrorDetail{Code: code, Message: err.Error()}, Quota: &qe.QuotaExceeded}})
		return
	}
	writeJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: err.Error()}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// maxJSONBody bounds a JSON request body.
const maxJSONBody = 1 << 20

// decodeJSON reads a JSON body into v, strictly: unknown fields and
// trailing data are errors that say what to fix. An empty body is {}.
func decodeJSON(r *http.Request, v any) error {
	body := http.MaxBytesReader(nil, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("request body is larger than %d bytes: %w", maxJSONBody, api.ErrInvalid)
		}
		return fmt.Errorf("request body is not valid JSON for this call: %v: %w", err, api.ErrInvalid)
	}
	// More would miss a stray '}' or ']': it reports only a value to come.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("request body has data after the JSON object: %w", api.ErrInvalid)
	}
	return nil
}
