package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"
)

// metrics writes the runtime's counters in the Prometheus text format.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	st := h.rt.Stats()
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	labeled(w, "agenthost_admissions_total", "Inputs admitted, by policy decision (start: the thread was idle).", "decision", st.Admissions)
	labeled(w, "agenthost_runs_terminal_total", "Runs ended, by terminal reason.", "reason", st.Terminal)
	counter(w, "agenthost_absorptions_total", "Queued runs absorbed by a completing run.", st.Absorptions)
	counter(w, "agenthost_absorb_entries_dropped_total", "Absorb entries dropped at commit because they no longer held.", st.DroppedAbsorbs)
	counter(w, "agenthost_policy_fallbacks_total", "Input policy calls that failed and fell back to queue.", st.PolicyFallbacks)
	counter(w, "agenthost_inject_boundaries_total", "Step boundaries at which the injection hook looked for offered inputs.", st.InjectBoundaries)
	hook := int64(0)
	if st.InjectHook {
		hook = 1
	}
	fmt.Fprintf(w, "# HELP agenthost_inject_hook_installed 1 if the injection hook is installed (the policy's manifest declares inject), else 0.\n# TYPE agenthost_inject_hook_installed gauge\nagenthost_inject_hook_installed %d\n", hook)
	counter(w, "agenthost_runs_recovered_total", "Active runs of a gone owner queued again (at start-up, or from a dead lease).", st.Recovered)
	counter(w, "agenthost_lease_renewals_total", "Renewals of this host's lease (several hosts on one store).", st.LeaseRenewals)
	counter(w, "agenthost_leases_lost_total", "Leases this host lost (it paused or could not renew in time) and replaced.", st.LeasesLost)
	counter(w, "agenthost_notices_sent_total", "Notices sent to other hosts (wake a thread's owner, a run settled).", st.NoticesSent)
	counter(w, "agenthost_notices_received_total", "Notices received from other hosts.", st.NoticesReceived)
	counter(w, "agenthost_commit_errors_total", "Terminal commits that failed and were retried.", st.CommitErrors)
	var restarts int64
	if h.opt.DriverRestarts != nil {
		restarts = h.opt.DriverRestarts()
	}
	counter(w, "agenthost_driver_restarts_total", "Store driver subprocess restarts.", restarts)
	if h.opt.CommitLatency != nil {
		h.opt.CommitLatency.write(w, "agenthost_store_commit_seconds", "Store driver commit latency.")
	}
	if h.opt.Metrics != nil {
		h.opt.Metrics(w)
	}
}

// latencyBuckets are the upper bounds, in seconds, of CommitLatency's
// buckets.
var latencyBuckets = [...]float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1}

// CommitLatency is a histogram of store commit latencies. Give its Observe
// to the runtime (host.Config.ObserveCommit) and the histogram to the
// handler (Options.CommitLatency). The zero value is ready for use.
type CommitLatency struct {
	mu     sync.Mutex
	counts [len(latencyBuckets) + 1]int64
	sum    time.Duration
	n      int64
}

// Observe counts one commit that took d.
func (h *CommitLatency) Observe(d time.Duration, _ error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := 0
	for i < len(latencyBuckets) && d.Seconds() > latencyBuckets[i] {
		i++
	}
	h.counts[i]++
	h.sum += d
	h.n++
}

// write writes the histogram in the Prometheus text format (cumulative
// buckets).
func (h *CommitLatency) write(w io.Writer, name, help string) {
	h.mu.Lock()
	counts, sum, n := h.counts, h.sum, h.n
	h.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var c int64
	for i, le := range latencyBuckets {
		c += counts[i]
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", name, strconv.FormatFloat(le, 'g', -1, 64), c)
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n", name, n)
	fmt.Fprintf(w, "%s_sum %g\n%s_count %d\n", name, sum.Seconds(), name, n)
}

func counter(w io.Writer, name, help string, v int64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
}

func labeled(w io.Writer, name, help, label string, m map[string]int64) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n", name, help, name)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s{%s=%q} %d\n", name, label, k, m[k])
	}
}
