package api

import (
	"errors"
	"fmt"
	"testing"
)

var allCodes = []struct {
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

func TestCodeRoundTrip(t *testing.T) {
	for _, tt := range allCodes {
		t.Run(tt.code, func(t *testing.T) {
			if got := ErrorForCode(tt.code); got != tt.err {
				t.Errorf("ErrorForCode(%q) = %v, want %v", tt.code, got, tt.err)
			}
			if got := CodeForError(tt.err); got != tt.code {
				t.Errorf("CodeForError(%v) = %q, want %q", tt.err, got, tt.code)
			}
			if got := CodeForError(ErrorForCode(tt.code)); got != tt.code {
				t.Errorf("CodeForError(ErrorForCode(%q)) = %q, want %q", tt.code, got, tt.code)
			}
			wrapped := fmt.Errorf("outer: %w", fmt.Errorf("sandbox sb-x: %w", tt.err))
			if got := CodeForError(wrapped); got != tt.code {
				t.Errorf("CodeForError(%v) = %q, want %q", wrapped, got, tt.code)
			}
		})
	}
}

func TestErrorForUnknownCode(t *testing.T) {
	for _, code := range []string{"", "bogus", "NOT_FOUND"} {
		if got := ErrorForCode(code); got != ErrInternal {
			t.Errorf("ErrorForCode(%q) = %v, want %v", code, got, ErrInternal)
		}
	}
}

// isErr is an error that says it is a sentinel through an Is method.
type isErr struct{ target error }

func (e isErr) Error() string        { return "custom" }
func (e isErr) Is(target error) bool { return target == e.target }

// unwrapErr wraps a sentinel through Unwrap, like agent.Error does.
type unwrapErr struct{ code string }

func (e *unwrapErr) Error() string { return "agent said so" }
func (e *unwrapErr) Unwrap() error { return ErrorForCode(e.code) }

func TestCodeForError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, CodeInternal},
		{"plain", errors.New("disk on fire"), CodeInternal},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", ErrQuota)), CodeQuota},
		{"Is method", isErr{ErrForbidden}, CodeForbidden},
		{"Unwrap to sentinel", &unwrapErr{CodeConflict}, CodeConflict},
		{"wrapped Unwrap", fmt.Errorf("proxy: %w", &unwrapErr{CodeUnavailable}), CodeUnavailable},
		// The first sentinel in errors.Is order wins: the cause of a
		// failed create, not the error of its cleanup.
		{"join conflict first", errors.Join(fmt.Errorf("x: %w", ErrConflict), fmt.Errorf("cleanup: %w", ErrNotFound)), CodeConflict},
		{"join not_found first", errors.Join(fmt.Errorf("cleanup: %w", ErrNotFound), ErrConflict), CodeNotFound},
		{"join plain first", errors.Join(errors.New("plain"), ErrQuota), CodeQuota},
		{"multi %w", fmt.Errorf("%w and %w", ErrUnavailable, ErrInvalid), CodeUnavailable},
		{"wrapped join", fmt.Errorf("deleting: %w", errors.Join(errors.New("rm"), ErrForbidden)), CodeForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Many times: a map-ordered implementation would flake here.
			for range 50 {
				if got := CodeForError(tt.err); got != tt.want {
					t.Fatalf("CodeForError(%v) = %q, want %q", tt.err, got, tt.want)
				}
			}
		})
	}
}
