package httpapi

import (
	"context"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agenthost/agenthost/host"
)

// newRegistry builds the registry /metrics serves: the runtime's counters
// (read at each scrape), the runs by state, the HTTP requests, the Go and
// process collectors, agenthost_build_info and the collectors of
// Options.Collectors.
func (h *Handler) newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		runtimeCollector{h},
		buildInfo(),
		h.http.requests, h.http.seconds,
	)
	if h.opt.CommitLatency != nil {
		reg.MustRegister(h.opt.CommitLatency.histogram())
	}
	for _, c := range h.opt.Collectors {
		reg.MustRegister(c)
	}
	return reg
}

// Version is the main module's version as the build recorded it, or
// "(devel)".
func Version() (version, revision string) {
	version, revision = "(devel)", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return
	}
	if bi.Main.Version != "" {
		version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			revision = s.Value
		}
	}
	return
}

// buildInfo is agenthost_build_info: always 1, its labels say what runs.
func buildInfo() prometheus.Collector {
	version, revision := Version()
	goversion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goversion = bi.GoVersion
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "agenthost_build_info",
		Help:        "Always 1; the labels name the build: version, revision and Go version.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goversion},
	})
	g.Set(1)
	return g
}

// httpMetrics count the requests by route pattern and status code.
type httpMetrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	// series holds the counter and histogram of each route and code seen,
	// so that a request does not look its labels up again (a few dozen
	// pairs: the routes are fixed, the codes few).
	series *sync.Map // routeCode → httpSeries
}

type routeCode struct {
	route string
	code  int
}

type httpSeries struct {
	requests prometheus.Counter
	seconds  prometheus.Observer
}

func newHTTPMetrics() httpMetrics {
	return httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "agenthost_http_requests_total",
			Help: "HTTP requests answered, by route pattern (\"unmatched\" for no route) and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "agenthost_http_request_seconds",
			Help:    "HTTP request latency until the handler returned (an event stream: until it ended), by route pattern and status code.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"route", "code"}),
		series: &sync.Map{},
	}
}

func (m httpMetrics) observe(route string, code int, d time.Duration) {
	k := routeCode{route, code}
	v, ok := m.series.Load(k)
	if !ok {
		c := strconv.Itoa(code)
		v, _ = m.series.LoadOrStore(k, httpSeries{requests: m.requests.WithLabelValues(route, c), seconds: m.seconds.WithLabelValues(route, c)})
	}
	s := v.(httpSeries)
	s.requests.Inc()
	s.seconds.Observe(d.Seconds())
}

// runtimeCollector reads the runtime's counters at each scrape, and counts
// its runs by state in the store.
type runtimeCollector struct{ h *Handler }

var (
	descAdmissions = prometheus.NewDesc("agenthost_admissions_total", "Inputs admitted, by policy decision (start: the thread was idle).", []string{"decision"}, nil)
	descTerminal   = prometheus.NewDesc("agenthost_runs_terminal_total", "Runs ended, by terminal reason.", []string{"reason"}, nil)
	descRuns       = prometheus.NewDesc("agenthost_runs", "Runs in the store by state (active: executing; waiting: active in the store, waiting for answers to tool calls; queued), counted at the scrape; absent when the store did not answer in time.", []string{"state"}, nil)
	descToolDec    = prometheus.NewDesc("agenthost_tool_decisions_total", "Tool calls decided by the tool policy, by decision (allow, deny, ask); a failed policy's fallback included.", []string{"decision"}, nil)
	descAnswers    = prometheus.NewDesc("agenthost_approval_answers_total", "Answers recorded to tool calls a run waited on, by action (approve, edit, reject, respond; the time limit's rejects included).", []string{"action"}, nil)
	descInjectHook = prometheus.NewDesc("agenthost_inject_hook_installed", "1 if the injection hook is installed (the policy's manifest declares inject), else 0.", nil, nil)
	plainCounters  = []struct {
		desc *prometheus.Desc
		v    func(host.Stats, *Handler) int64
	}{
		{prometheus.NewDesc("agenthost_absorptions_total", "Queued runs absorbed by a completing run.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.Absorptions }},
		{prometheus.NewDesc("agenthost_absorb_entries_dropped_total", "Absorb entries dropped at commit because they no longer held.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.DroppedAbsorbs }},
		{prometheus.NewDesc("agenthost_policy_fallbacks_total", "Input policy calls that failed and fell back to queue.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.PolicyFallbacks }},
		{prometheus.NewDesc("agenthost_inject_boundaries_total", "Step boundaries at which the injection hook looked for offered inputs.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.InjectBoundaries }},
		{prometheus.NewDesc("agenthost_runs_recovered_total", "Active runs of a gone owner queued again (at start-up, or from a dead lease).", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.Recovered }},
		{prometheus.NewDesc("agenthost_lease_renewals_total", "Renewals of this host's lease (several hosts on one store).", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.LeaseRenewals }},
		{prometheus.NewDesc("agenthost_leases_lost_total", "Leases this host lost (it paused or could not renew in time) and replaced.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.LeasesLost }},
		{prometheus.NewDesc("agenthost_notices_sent_total", "Notices sent to other hosts (wake a thread's owner, a run settled).", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.NoticesSent }},
		{prometheus.NewDesc("agenthost_notices_received_total", "Notices received from other hosts.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.NoticesReceived }},
		{prometheus.NewDesc("agenthost_notice_records_total", "Records taken from other hosts' notices instead of read from the store (threads' snapshots, settled runs).", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.NoticeRecords }},
		{prometheus.NewDesc("agenthost_tool_policy_failures_total", "Tool policy calls that failed and were answered by the fallback.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.ToolPolicyFailures }},
		{prometheus.NewDesc("agenthost_runs_waited_total", "Times a run began waiting for answers to tool calls.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.Waits }},
		{prometheus.NewDesc("agenthost_runs_resumed_total", "Waiting runs executed again once their calls were answered.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.Resumes }},
		{prometheus.NewDesc("agenthost_approval_timeouts_total", "Tool calls rejected because no answer came within approval_timeout.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.ApprovalTimeouts }},
		{prometheus.NewDesc("agenthost_commit_errors_total", "Terminal commits that failed and were retried.", nil, nil), func(s host.Stats, _ *Handler) int64 { return s.CommitErrors }},
		{prometheus.NewDesc("agenthost_driver_restarts_total", "Store driver subprocess restarts.", nil, nil), func(_ host.Stats, h *Handler) int64 {
			if h.opt.DriverRestarts == nil {
				return 0
			}
			return h.opt.DriverRestarts()
		}},
	}
)

func (c runtimeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descAdmissions
	ch <- descTerminal
	ch <- descRuns
	ch <- descToolDec
	ch <- descAnswers
	ch <- descInjectHook
	for _, p := range plainCounters {
		ch <- p.desc
	}
}

func (c runtimeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.h.rt.Stats()
	for k, v := range st.Admissions {
		ch <- prometheus.MustNewConstMetric(descAdmissions, prometheus.CounterValue, float64(v), k)
	}
	for k, v := range st.Terminal {
		ch <- prometheus.MustNewConstMetric(descTerminal, prometheus.CounterValue, float64(v), k)
	}
	for k, v := range st.ToolDecisions {
		ch <- prometheus.MustNewConstMetric(descToolDec, prometheus.CounterValue, float64(v), k)
	}
	for k, v := range st.Answers {
		ch <- prometheus.MustNewConstMetric(descAnswers, prometheus.CounterValue, float64(v), k)
	}
	hook := 0.0
	if st.InjectHook {
		hook = 1
	}
	ch <- prometheus.MustNewConstMetric(descInjectHook, prometheus.GaugeValue, hook)
	for _, p := range plainCounters {
		ch <- prometheus.MustNewConstMetric(p.desc, prometheus.CounterValue, float64(p.v(st, c.h)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.h.opt.ReadyTimeout)
	defer cancel()
	counts, err := c.h.rt.RunCounts(ctx)
	if err != nil {
		c.h.log.Warn("metrics: counting the runs by state failed", "err", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(counts.Active), "active")
	ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(counts.Queued), "queued")
	ch <- prometheus.MustNewConstMetric(descRuns, prometheus.GaugeValue, float64(counts.Waiting), "waiting")
}

// metrics serves the registry in the Prometheus text format (or the format
// the scraper asks for).
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	h.metricsHandler.ServeHTTP(w, r)
}

// commitBuckets are the upper bounds, in seconds, of CommitLatency's
// buckets.
var commitBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// CommitLatency is a histogram of store commit latencies,
// agenthost_store_commit_seconds. Give its Observe to the runtime
// (host.Config.ObserveCommit) and the histogram to the handler
// (Options.CommitLatency). The zero value is ready for use.
type CommitLatency struct {
	once sync.Once
	h    prometheus.Histogram
}

func (c *CommitLatency) histogram() prometheus.Histogram {
	c.once.Do(func() {
		c.h = prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "agenthost_store_commit_seconds", Help: "Store driver commit latency.", Buckets: commitBuckets,
		})
	})
	return c.h
}

// Observe counts one commit that took d.
func (c *CommitLatency) Observe(d time.Duration, _ error) {
	c.histogram().Observe(d.Seconds())
}
