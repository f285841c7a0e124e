//go:build pprof

package main

import (
	"net/http"
	"net/http/pprof"
)

// withProfiling serves Go's profiles under /debug/pprof/ on the admin
// listener, beside the admin handler. Only a binary built with -tags pprof
// has them: the load harness builds one for -profile, nothing else should.
func withProfiling(admin http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.Handle("/", admin)
	return mux
}
