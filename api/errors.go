package api

import "errors"

// Sentinel errors. Internal packages wrap them with context
// (fmt.Errorf("sandbox %s: %w", id, api.ErrNotFound)); the server maps them to
// status codes in one place and the Go SDK maps status codes back, so
// errors.Is works on both sides of the wire.
var (
	ErrInvalid      = errors.New("invalid")
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict")
	ErrQuota        = errors.New("quota exceeded")
	ErrUnavailable  = errors.New("unavailable")
	ErrInternal     = errors.New("internal error")
)

var codeErrors = map[string]error{
	CodeInvalid:      ErrInvalid,
	CodeUnauthorized: ErrUnauthorized,
	CodeForbidden:    ErrForbidden,
	CodeNotFound:     ErrNotFound,
	CodeConflict:     ErrConflict,
	CodeQuota:        ErrQuota,
	CodeUnavailable:  ErrUnavailable,
	CodeInternal:     ErrInternal,
}

// ErrorForCode returns the sentinel for an error code, ErrInternal when unknown.
func ErrorForCode(code string) error {
	if err, ok := codeErrors[code]; ok {
		return err
	}
	return ErrInternal
}

// CodeForError returns the error code of the first sentinel err wraps,
// CodeInternal when none.
func CodeForError(err error) string {
	for code, sentinel := range codeErrors {
		if errors.Is(err, sentinel) {
			return code
		}
	}
	return CodeInternal
}
