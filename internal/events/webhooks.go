package events

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/store"
)

// Webhooks: each webhook has a worker that delivers its team's events in
// order, from the last one it delivered (kept in the store, so a restart
// resumes there). A delivery is a POST of the event's JSON; an answer
// other than 2xx, or none, is retried with exponential backoff, up to
// WebhookAttempts; then the event is given up on (recorded as the
// webhook's last error) and the next one goes.

// Signature headers of a delivery.
const (
	HeaderEventID   = "Warren-Event-Id"
	HeaderTimestamp = "Warren-Timestamp"
	HeaderSignature = "Warren-Signature"
)

// Sign returns the Warren-Signature of a delivery of body at timestamp
// ts (Unix seconds): "v1=" + hex(HMAC-SHA256(secret, ts + "." + body)).
func Sign(secret, ts string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}

// MaxWebhooks bounds a team's webhooks.
const MaxWebhooks = 10

// CreateWebhook registers url for teamID's events from now on, and returns
// it with its secret (shown only now).
func (h *Hub) CreateWebhook(ctx context.Context, teamID, rawURL string) (api.Webhook, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return api.Webhook{}, fmt.Errorf("url %q: want an http or https URL, like https://example.com/warren: %w", rawURL, api.ErrInvalid)
	}
	existing, err := h.st.ListWebhooks(ctx, teamID)
	if err != nil {
		return api.Webhook{}, err
	}
	if len(existing) >= MaxWebhooks {
		return api.Webhook{}, fmt.Errorf("a team has at most %d webhooks; delete one first: %w", MaxWebhooks, api.ErrConflict)
	}
	last, err := h.st.LastEventID(ctx)
	if err != nil {
		return api.Webhook{}, err
	}
	b := make([]byte, 24)
	rand.Read(b)
	id := make([]byte, 6)
	rand.Read(id)
	w := store.Webhook{ID: "wh-" + hex.EncodeToString(id), TeamID: teamID, URL: u.String(),
		Secret: "whsec_" + hex.EncodeToString(b), CreatedAt: time.Now().UTC(), Cursor: last}
	if err := h.st.CreateWebhook(ctx, w); err != nil {
		return api.Webhook{}, err
	}
	h.mu.Lock()
	if h.ctx != nil {
		h.startHook(w)
	}
	h.mu.Unlock()
	out := webhookToAPI(w)
	out.Secret = w.Secret
	return out, nil
}

func webhookToAPI(w store.Webhook) api.Webhook {
	return api.Webhook{ID: w.ID, URL: w.URL, CreatedAt: w.CreatedAt, Delivered: w.Cursor, LastStatus: w.LastStatus, LastError: w.LastError}
}

// ListWebhooks lists teamID's webhooks, without their secrets.
func (h *Hub) ListWebhooks(ctx context.Context, teamID string) ([]api.Webhook, error) {
	ws, err := h.st.ListWebhooks(ctx, teamID)
	if err != nil {
		return nil, err
	}
	out := make([]api.Webhook, 0, len(ws))
	for _, w := range ws {
		out = append(out, webhookToAPI(w))
	}
	return out, nil
}

// DeleteWebhook removes a webhook of teamID; deliveries stop at once.
func (h *Hub) DeleteWebhook(ctx context.Context, teamID, id string) error {
	if err := h.st.DeleteWebhook(ctx, teamID, id); err != nil {
		return err
	}
	h.mu.Lock()
	if w := h.hooks[id]; w != nil {
		w.cancel()
		delete(h.hooks, id)
	}
	h.mu.Unlock()
	return nil
}

type hookWorker struct {
	hook   store.Webhook
	wake   chan struct{}
	cancel context.CancelFunc
}

func (w *hookWorker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// startHook starts w's worker. h.mu is held.
func (h *Hub) startHook(w store.Webhook) {
	ctx, cancel := context.WithCancel(h.ctx)
	hw := &hookWorker{hook: w, wake: make(chan struct{}, 1), cancel: cancel}
	h.hooks[w.ID] = hw
	go h.deliverLoop(ctx, hw)
}

func (h *Hub) deliverLoop(ctx context.Context, hw *hookWorker) {
	client := &http.Client{Timeout: h.cfg.WebhookTimeout}
	cursor := hw.hook.Cursor
	log := h.log.With("webhook", hw.hook.ID)
	for ctx.Err() == nil {
		rows, err := h.st.EventsAfter(ctx, hw.hook.TeamID, cursor, 100)
		if err != nil {
			log.Warn("webhook: reading events", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		if len(rows) == 0 {
			select {
			case <-hw.wake:
			case <-ctx.Done():
			}
			continue
		}
		for _, r := range rows {
			status, err := h.deliver(ctx, client, hw.hook, r)
			if ctx.Err() != nil {
				return // stopped or deleted: the cursor stays, the event goes out next time
			}
			msg := ""
			if err != nil {
				msg = err.Error()
				log.Warn("webhook: giving up on an event", "event_id", r.ID, "attempts", h.cfg.WebhookAttempts, "err", err)
			}
			if err := h.st.SetWebhookCursor(context.WithoutCancel(ctx), hw.hook.ID, r.ID, status, msg); err != nil {
				log.Warn("webhook: recording a delivery", "err", err)
			}
			cursor = r.ID
		}
	}
}

// deliver POSTs event r to w, retrying with backoff; it returns the last
// status and, when every attempt failed, why.
func (h *Hub) deliver(ctx context.Context, client *http.Client, w store.Webhook, r store.EventRow) (int, error) {
	ev := rowToAPI(r)
	body, _ := json.Marshal(ev)
	wait := h.cfg.WebhookBackoff
	var status int
	var lastErr error
	for attempt := 0; attempt < h.cfg.WebhookAttempts; attempt++ {
		if attempt > 0 {
			if !sleep(ctx, wait) {
				return status, ctx.Err()
			}
			wait = min(wait*2, h.cfg.WebhookMaxBackoff)
		}
		status, lastErr = h.post(ctx, client, w, ev.ID, body)
		if lastErr == nil {
			return status, nil
		}
	}
	return status, lastErr
}

func (h *Hub) post(ctx context.Context, client *http.Client, w store.Webhook, id int64, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "warren-webhook/1")
	req.Header.Set(HeaderEventID, strconv.FormatInt(id, 10))
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, Sign(w.Secret, ts, body))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Errorf("%s answered %s", w.URL, resp.Status)
	}
	return resp.StatusCode, nil
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
