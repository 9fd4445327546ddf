package httpapi

import (
	"context"
	"net/http"
	"time"
)

// defaultReadyTimeout bounds the store check of /readyz.
const defaultReadyTimeout = 2 * time.Second

// readyz is readiness, where /healthz is liveness: it answers 200 only when
// a submission can be accepted now, 503 with the reason otherwise: the
// runtime is draining (shutting down), or the store driver does not answer
// (down, being relaunched, or failing to relaunch) within ReadyTimeout.
// A load balancer stops sending work on 503; a supervisor restarts the
// process only on a failing /healthz.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.rt.Draining() {
		h.notReady(w, "draining", "the server is shutting down and accepts no new inputs")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opt.ReadyTimeout)
	defer cancel()
	if _, err := h.rt.Store().Driver().Info(ctx); err != nil {
		// /readyz needs no token: the driver's error, which may name
		// paths and addresses, goes to the log, not to the caller.
		h.log.Warn("readyz: the store driver does not answer", "error", err)
		h.notReady(w, "store_unavailable", "the store driver does not answer")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "epoch": h.rt.Epoch()})
}

func (h *Handler) notReady(w http.ResponseWriter, reason, detail string) {
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not_ready", "reason": reason, "detail": detail})
}
