// Package metrics serves Warren's Prometheus metrics (GET /metrics) and
// reads a sandbox's CPU and memory from its cgroup.
//
//	warren_sandboxes{state}                    sandboxes by state: creating, running,
//	                                           paused (in memory), stored (paused on
//	                                           disk), error, pooled (warm pool)
//	warren_operation_duration_seconds{op}      create, pause, resume, snapshot, fork
//	                                           (per sandbox forked), restore, revert,
//	                                           delete, store
//	warren_operation_errors_total{op,code}     failed operations by API error code,
//	                                           quota refusals included (code "quota")
//	warren_events_total{kind}                  lifecycle changes
//	warren_host_memory_available_bytes         MemAvailable
//	warren_host_memory_total_bytes
//	warren_host_disk_available_bytes           free space of the state directory's
//	warren_host_disk_total_bytes               filesystem
//
// Figures read at scrape time (sandboxes, host) come from the store and
// the host, so they are right after a restart; counters and histograms
// start from zero with each server process.
package metrics

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/warrenhq/warren/api"
	"github.com/warrenhq/warren/internal/sandbox"
	"github.com/warrenhq/warren/internal/store"
)

// Metrics holds the registry. It is a sandbox.Observer.
type Metrics struct {
	reg       *prometheus.Registry
	durations *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	events    *prometheus.CounterVec
}

var _ sandbox.Observer = (*Metrics)(nil)

// New returns the metrics of a server whose store is st and state
// directory stateDir.
func New(st *store.Store, stateDir string) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "warren_operation_duration_seconds",
			Help: "How long lifecycle operations took, until acknowledged.",
			// 5 ms to about 80 s.
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
		}, []string{"op"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_operation_errors_total",
			Help: "Lifecycle operations that failed, by operation and API error code.",
		}, []string{"op", "code"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "warren_events_total",
			Help: "Lifecycle changes, by kind.",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(m.durations, m.errors, m.events,
		&stateCollector{st: st, stateDir: stateDir},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Registry is the registry, for tests and for adding collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// durationOps maps event kinds to the operation their duration measures.
var durationOps = map[string]string{
	api.EventCreated: "create", api.EventPaused: "pause", api.EventIdlePaused: "pause", api.EventResumed: "resume",
	api.EventSnapshotted: "snapshot", api.EventForked: "fork", api.EventRestored: "restore",
	api.EventReverted: "revert", api.EventDeleted: "delete", api.EventStored: "store",
}

// SandboxEvent counts ev and observes its duration.
func (m *Metrics) SandboxEvent(_ context.Context, ev sandbox.Event) {
	if ev.Pool != "" {
		return
	}
	m.events.WithLabelValues(ev.Kind).Inc()
	switch {
	case ev.Kind == api.EventQuotaRefused:
		m.errors.WithLabelValues(ev.Op, api.CodeQuota).Inc()
	case ev.Failed():
		m.errors.WithLabelValues(ev.Op, ev.Code).Inc()
	case ev.Kind == api.EventError:
		m.errors.WithLabelValues(orDefault(ev.Op, "sandbox"), orDefault(ev.Code, api.CodeInternal)).Inc()
	default:
		if op, ok := durationOps[ev.Kind]; ok && ev.Duration > 0 {
			m.durations.WithLabelValues(op).Observe(ev.Duration.Seconds())
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// stateCollector reads sandboxes by state and host headroom at scrape
// time.
type stateCollector struct {
	st       *store.Store
	stateDir string
}

var (
	descSandboxes = prometheus.NewDesc("warren_sandboxes", "Sandboxes by state (paused in memory: paused; on disk: stored; waiting in a warm pool: pooled).", []string{"state"}, nil)
	descMemAvail  = prometheus.NewDesc("warren_host_memory_available_bytes", "The host's available memory (MemAvailable).", nil, nil)
	descMemTotal  = prometheus.NewDesc("warren_host_memory_total_bytes", "The host's memory.", nil, nil)
	descDiskAvail = prometheus.NewDesc("warren_host_disk_available_bytes", "Free space on the state directory's filesystem.", []string{"path"}, nil)
	descDiskTotal = prometheus.NewDesc("warren_host_disk_total_bytes", "Size of the state directory's filesystem.", []string{"path"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descMemAvail, descMemTotal, descDiskAvail, descDiskTotal} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts := map[string]float64{}
	for _, s := range []string{api.StateCreating, api.StateRunning, api.StatePaused, "stored", api.StateError, "pooled"} {
		counts[s] = 0
	}
	if cs, err := c.st.CountSandboxes(ctx); err == nil {
		for _, sc := range cs {
			state := sc.State
			switch {
			case sc.Pooled:
				state = "pooled"
			case sc.State == api.StatePaused && sc.Stored:
				state = "stored"
			}
			counts[state] += float64(sc.Count)
		}
		for s, n := range counts {
			ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, n, s)
		}
	}
	if avail, total, ok := hostMemory(); ok {
		ch <- prometheus.MustNewConstMetric(descMemAvail, prometheus.GaugeValue, float64(avail))
		ch <- prometheus.MustNewConstMetric(descMemTotal, prometheus.GaugeValue, float64(total))
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(c.stateDir, &fs); err == nil {
		ch <- prometheus.MustNewConstMetric(descDiskAvail, prometheus.GaugeValue, float64(fs.Bavail)*float64(fs.Bsize), c.stateDir)
		ch <- prometheus.MustNewConstMetric(descDiskTotal, prometheus.GaugeValue, float64(fs.Blocks)*float64(fs.Bsize), c.stateDir)
	}
}

// hostMemory reads MemAvailable and MemTotal, in bytes.
func hostMemory() (avail, total int64, ok bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	found := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "MemAvailable:":
			avail, found = kb*1024, found+1
		case "MemTotal:":
			total, found = kb*1024, found+1
		}
	}
	return avail, total, found == 2
}
