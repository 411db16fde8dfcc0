package e2b

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/warrenhq/warren/api"
)

// The Connect protocol with its JSON codec, as the SDK's connect-web
// transport speaks it (E2B-PROTOCOL.md 3.1):
//
//	unary:     POST application/json, body = message; 200 + message, or
//	           non-2xx + {"code":"not_found","message":...}
//	streaming: POST application/connect+json, body = one envelope; 200 +
//	           envelopes, the last with flags 0x02 carrying {} or {"error":...}
//
// An envelope is [flags:1][length:4, big endian][JSON].

const (
	flagEndStream  = 0x02
	maxMessage     = 16 << 20
	contentConnect = "application/connect+json"
)

// connectError is a Connect error: code is one of Connect's names.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *connectError) Error() string { return e.Code + ": " + e.Message }

// connectCodes maps Warren's error codes to Connect's, and Connect's to
// the HTTP statuses a unary error is sent with.
var connectCodes = map[string]string{
	api.CodeInvalid:      "invalid_argument",
	api.CodeUnauthorized: "unauthenticated",
	api.CodeForbidden:    "permission_denied",
	api.CodeNotFound:     "not_found",
	api.CodeConflict:     "failed_precondition",
	api.CodeQuota:        "resource_exhausted",
	api.CodeUnavailable:  "unavailable",
	api.CodeInternal:     "internal",
}

var connectStatus = map[string]int{
	"invalid_argument":    http.StatusBadRequest,
	"failed_precondition": http.StatusBadRequest,
	"unauthenticated":     http.StatusUnauthorized,
	"permission_denied":   http.StatusForbidden,
	"not_found":           http.StatusNotFound,
	"already_exists":      http.StatusConflict,
	"resource_exhausted":  http.StatusTooManyRequests,
	"unimplemented":       http.StatusNotImplemented,
	"unavailable":         http.StatusServiceUnavailable,
	"internal":            http.StatusInternalServerError,
	"unknown":             http.StatusInternalServerError,
}

func toConnectError(err error) *connectError {
	var ce *connectError
	if errors.As(err, &ce) {
		return ce
	}
	c, ok := connectCodes[api.CodeForError(err)]
	if !ok {
		c = "unknown"
	}
	return &connectError{Code: c, Message: err.Error()}
}

func errUnimplemented(format string, args ...any) error {
	return &connectError{Code: "unimplemented", Message: fmt.Sprintf(format, args...)}
}

// readUnary decodes a unary request body.
func readUnary(r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxMessage))
	if err != nil {
		return &connectError{Code: "invalid_argument", Message: "reading the request: " + err.Error()}
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &connectError{Code: "invalid_argument", Message: "request is not valid JSON for this method: " + err.Error()}
	}
	return nil
}

func writeUnary(w http.ResponseWriter, v any) {
	writeJSON(w, http.StatusOK, v)
}

func writeUnaryError(w http.ResponseWriter, err error) {
	ce := toConnectError(err)
	status, ok := connectStatus[ce.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, ce)
}

// readEnvelope decodes the one envelope of a server-streaming request.
func readEnvelope(r *http.Request, v any) error {
	var hdr [5]byte
	if _, err := io.ReadFull(r.Body, hdr[:]); err != nil {
		return &connectError{Code: "invalid_argument", Message: "reading the request envelope: " + err.Error()}
	}
	if hdr[0]&0x01 != 0 {
		return &connectError{Code: "unimplemented", Message: "compressed request messages are not supported"}
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return &connectError{Code: "resource_exhausted", Message: fmt.Sprintf("request message of %d bytes is over the limit of %d", n, maxMessage)}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.Body, b); err != nil {
		return &connectError{Code: "invalid_argument", Message: "reading the request message: " + err.Error()}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &connectError{Code: "invalid_argument", Message: "request is not valid JSON for this method: " + err.Error()}
	}
	return nil
}

// stream writes the envelopes of a server-streaming answer; its methods
// are safe for concurrent use.
type stream struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	rc   *http.ResponseController
	done bool
	err  error // the first write error: the client went away
}

func newStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", contentConnect)
	w.WriteHeader(http.StatusOK)
	return &stream{w: w, rc: http.NewResponseController(w)}
}

func (s *stream) frame(flags byte, v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || s.err != nil {
		return s.err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 5, 5+len(b))
	buf[0] = flags
	binary.BigEndian.PutUint32(buf[1:], uint32(len(b)))
	buf = append(buf, b...)
	if _, err := s.w.Write(buf); err != nil {
		s.err = err
		return err
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
	return s.err
}

// send writes one message.
func (s *stream) send(v any) error { return s.frame(0, v) }

// end writes the end-of-stream frame, with err if not nil; later sends
// are dropped.
func (s *stream) end(err error) {
	body := map[string]any{}
	if err != nil {
		body["error"] = toConnectError(err)
	}
	_ = s.frame(flagEndStream, body)
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

// streamError answers a streaming call that failed before its first
// message: Connect sends such errors in the end-of-stream frame, with 200.
func streamError(w http.ResponseWriter, err error) {
	newStream(w).end(err)
}
