//go:build !pprof

package main

import "net/http"

// withProfiling is the admin handler as it is: the pprof endpoints exist
// only in a binary built with -tags pprof (the load harness's -profile).
func withProfiling(admin http.Handler) http.Handler { return admin }
