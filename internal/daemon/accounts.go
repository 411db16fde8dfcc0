package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/accounts"
	"github.com/warrenhq/warren/internal/events"
	"github.com/warrenhq/warren/internal/metrics"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/server"
	"github.com/warrenhq/warren/internal/store"
	"github.com/warrenhq/warren/internal/usage"
)

// accountParts are quotas, metering, events and metrics: made before
// recovery (so they observe it), started after it, stopped last (after
// the listener), with a last usage flush.
type accountParts struct {
	cfg      Config
	accounts *accounts.Accounts
	meter    *usage.Meter
	hub      *events.Hub
	metrics  *metrics.Metrics
	cancel   context.CancelFunc
}

// newAccounts makes the parts and hooks them to m: quotas as its
// admission, metering, events and metrics as its observers.
func newAccounts(cfg Config, st *store.Store, m *sandbox.Manager, log *slog.Logger) *accountParts {
	a := &accountParts{
		cfg:      cfg,
		accounts: accounts.New(st, cfg.Quota),
		meter:    usage.New(st, m, usage.Config{FlushInterval: time.Duration(cfg.UsageFlushS) * time.Second, Prices: cfg.Prices}, log),
		hub:      events.New(st, events.Config{Retention: time.Duration(cfg.EventRetentionH) * time.Hour}, log),
		metrics:  metrics.New(st, cfg.StateDir),
	}
	m.SetAdmission(a.accounts)
	m.Observe(a.meter, a.hub, a.metrics)
	return a
}

// start starts metering and event delivery; they run until ctx ends (event
// streams end then, so a graceful shutdown does not wait for their
// clients) or stop.
func (a *accountParts) start(ctx context.Context) error {
	ctx, a.cancel = context.WithCancel(ctx)
	if err := a.meter.Start(ctx); err != nil {
		a.cancel()
		return fmt.Errorf("starting usage metering: %w", err)
	}
	if err := a.hub.Start(ctx); err != nil {
		a.cancel()
		<-a.meter.Done()
		return fmt.Errorf("starting events: %w", err)
	}
	return nil
}

// stop ends event streams and deliveries and flushes usage a last time.
func (a *accountParts) stop() {
	if a.cancel == nil {
		return
	}
	a.cancel()
	<-a.meter.Done()
	<-a.hub.Done()
}

// wire gives the API server the accounts' handlers.
func (a *accountParts) wire(s *server.Server) *server.Server {
	s.SetAccounts(server.Accounts{Accounts: a.accounts, Meter: a.meter, Events: a.hub, Metrics: a.metrics,
		CgroupParent: "/warren", PublicMetrics: a.cfg.MetricsPublic})
	return s
}

// validateAccounts checks the accounts' part of the config.
func (c Config) validateAccounts() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("config: "+format+": %w", append(args, api.ErrInvalid)...)
	}
	if err := c.Quota.Validate(); err != nil {
		return bad("quota: %v", err)
	}
	p := c.Prices
	if p.VCPUSecond < 0 || p.MemoryGBSecond < 0 || p.StorageGBMonth < 0 || p.StorageFreeGB < 0 {
		return bad("prices must not be negative")
	}
	if c.UsageFlushS < 1 || c.UsageFlushS > 3600 {
		return bad("usage_flush_s %d: flush usage every 1 to 3600 seconds (a crash loses at most that)", c.UsageFlushS)
	}
	if c.EventRetentionH < 1 {
		return bad("event_retention_h %d: keep events at least an hour", c.EventRetentionH)
	}
	return nil
}

// accountsConfig is the accounts' part of Config (its fields are
// Config's: "quota", "prices", ... at the top level of the config file).
type accountsConfig struct {
	// Quota is every team's default quota (0: unlimited); PUT
	// /v1/teams/{team}/quota overrides it per team.
	Quota accounts.Limits `json:"quota"`
	// Prices turn usage into cost in GET /v1/usage.
	Prices usage.Prices `json:"prices"`
	// UsageFlushS is how often usage is written: the most a crash loses.
	UsageFlushS int `json:"usage_flush_s"`
	// EventRetentionH is how long lifecycle events are kept.
	EventRetentionH int `json:"event_retention_h"`
	// MetricsPublic serves GET /metrics without a key (else it needs the
	// admin key).
	MetricsPublic bool `json:"metrics_public"`
}

func defaultAccountsConfig() accountsConfig {
	return accountsConfig{Prices: usage.DefaultPrices(), UsageFlushS: 10, EventRetentionH: 7 * 24}
}
