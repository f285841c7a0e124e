package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"syscall"
	"time"
)

// SetLogClock makes h's access log throttle read the time from now.
func SetLogClock(h *Handler, now func() time.Time) { h.refusals.Now = now }

// TrustUpstreams makes the transports of h's current pools trust the
// certificates of roots, for upstreams with a test certificate.
func TrustUpstreams(h *Handler, roots *x509.CertPool) {
	for _, p := range h.current.Load().pools {
		if p.owned != nil {
			p.owned.std.TLSClientConfig = &tls.Config{RootCAs: roots}
		}
	}
}

// ProcessCPU is the CPU time the process has used, user and system, every
// thread (the garbage collector's too): on a shared machine a steadier
// figure of a request's cost than the time it took.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
