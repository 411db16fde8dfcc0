package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/events"
)

// A stream that drops is resumed after the last event seen, and an id
// without data moves the position.
func TestEventsReconnect(t *testing.T) {
	var mu sync.Mutex
	var lastIDs []string
	conn := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		conn++
		n := conn
		lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch n {
		case 1:
			fmt.Fprint(w, "retry: 2000\nid: 7\n\n: a comment\n\n")
			fmt.Fprint(w, "id: 8\nevent: created\ndata: {\"id\":8,\"kind\":\"created\",\"sandbox_id\":\"sb-1\"}\n\n")
			// then the connection drops
		default:
			fmt.Fprint(w, "id: 8\n\n")
			fmt.Fprint(w, "id: 9\nevent: paused\ndata: {\"id\":9,\"kind\":\"paused\",\"sandbox_id\":\"sb-1\"}\n\n")
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "k")
	var got []api.Event
	stop := errors.New("enough")
	err := c.Events(t.Context(), FromNow, func(ev api.Event) error {
		got = append(got, ev)
		if len(got) == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Events: got %v, want the callback's error", err)
	}
	if len(got) != 2 || got[0].ID != 8 || got[1].ID != 9 || got[1].Kind != "paused" {
		t.Errorf("events: got %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lastIDs) != 2 || lastIDs[0] != "" || lastIDs[1] != "8" {
		t.Errorf("Last-Event-ID per connection: got %q, want [\"\" \"8\"]", lastIDs)
	}
}

func TestEventsUnauthorized(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":"unauthorized","message":"API key not recognised or revoked: unauthorized"}}`)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := New(srv.URL, "bad").Events(ctx, 0, func(api.Event) error { return nil })
	if !errors.Is(err, ErrUnauthorized) {
		t.Errorf("got %v, want unauthorized at once", err)
	}
}

func TestQuotaErrorDecoded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprint(w, `{"error":{"code":"quota","message":"create refused: quota exceeded","quota":{"limit":"running_sandboxes","max":2,"used":2,"requested":1}}}`)
	}))
	defer srv.Close()
	_, err := New(srv.URL, "k").CreateSandbox(t.Context(), api.CreateSandboxRequest{})
	var e *Error
	if !errors.Is(err, ErrQuota) || !errors.As(err, &e) || e.Quota == nil || e.Quota.Limit != "running_sandboxes" || e.Quota.Max != 2 {
		t.Errorf("got %v (%+v), want a quota error with its figures", err, e)
	}
}

func TestVerifyWebhook(t *testing.T) {
	body := []byte(`{"id":1,"kind":"created"}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	mac := hmac.New(sha256.New, []byte("whsec_x"))
	mac.Write([]byte(ts + "." + string(body)))
	h := http.Header{}
	h.Set("Warren-Timestamp", ts)
	h.Set("Warren-Signature", "v1="+hex.EncodeToString(mac.Sum(nil)))
	if err := VerifyWebhook("whsec_x", h, body, time.Minute); err != nil {
		t.Errorf("a good delivery: %v", err)
	}
	if err := VerifyWebhook("whsec_y", h, body, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another secret: got %v", err)
	}
	if err := VerifyWebhook("whsec_x", h, append(body, ' '), 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a changed body: got %v", err)
	}
	old := strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)
	mac = hmac.New(sha256.New, []byte("whsec_x"))
	mac.Write([]byte(old + "." + string(body)))
	h.Set("Warren-Timestamp", old)
	h.Set("Warren-Signature", "v1="+hex.EncodeToString(mac.Sum(nil)))
	if err := VerifyWebhook("whsec_x", h, body, time.Minute); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a replay an hour old: got %v", err)
	}
}

// What the server signs, the SDK verifies.
func TestVerifyWebhookMatchesServer(t *testing.T) {
	body := []byte(`{"id":3}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	h := http.Header{}
	h.Set("Warren-Timestamp", ts)
	h.Set("Warren-Signature", events.Sign("whsec_z", ts, body))
	if err := VerifyWebhook("whsec_z", h, body, time.Minute); err != nil {
		t.Error(err)
	}
}
