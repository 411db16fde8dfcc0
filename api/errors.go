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

// codeErrors pairs each code with its sentinel, in a fixed order.
var codeErrors = []struct {
	code string
	err  error
}{
	{CodeInvalid, ErrInvalid},
	{CodeUnauthorized, ErrUnauthorized},
	{CodeForbidden, ErrForbidden},
	{CodeNotFound, ErrNotFound},
	{CodeConflict, ErrConflict},
	{CodeQuota, ErrQuota},
	{CodeUnavailable, ErrUnavailable},
	{CodeInternal, ErrInternal},
}

// ErrorForCode returns the sentinel for an error code, ErrInternal when unknown.
func ErrorForCode(code string) error {
	for _, ce := range codeErrors {
		if ce.code == code {
			return ce.err
		}
	}
	return ErrInternal
}

// CodeForError returns the code of the first sentinel err wraps,
// CodeInternal when none. "First" is in the order errors.Is walks the tree:
// err, then what it wraps, depth first, left to right; so for
// errors.Join(cause, cleanupErr) the cause's code wins, every time.
func CodeForError(err error) string {
	if code, ok := firstCode(err); ok {
		return code
	}
	return CodeInternal
}

func firstCode(err error) (string, bool) {
	for err != nil {
		is, _ := err.(interface{ Is(error) bool })
		for _, ce := range codeErrors {
			if err == ce.err || (is != nil && is.Is(ce.err)) {
				return ce.code, true
			}
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				if code, ok := firstCode(e); ok {
					return code, true
				}
			}
			return "", false
		default:
			return "", false
		}
	}
	return "", false
}
