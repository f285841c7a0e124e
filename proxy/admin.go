package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// readiness is the body of /readyz.
type readiness struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// AdminHandler serves /healthz, /readyz, /metrics and, under /v1/, api
// (Handler.AdminAPI; nil: none). It belongs on the admin listener only. /readyz answers 200 when ready returns nil within two
// seconds, and 503 otherwise, with {"ready": false, "reason": "..."}; a nil ready means no
// configuration is loaded yet.
func AdminHandler(ready func(ctx context.Context) error, gatherer prometheus.Gatherer, api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		err := errors.New("no configuration loaded")
		if ready != nil {
			err = ready(ctx)
		}
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(readiness{Ready: false, Reason: err.Error()})
			return
		}
		json.NewEncoder(w).Encode(readiness{Ready: true})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	if api != nil {
		mux.Handle("/v1/", api)
	}
	return mux
}
