package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"syscall"
	"time"

	"github.com/edgegate/gateway/overload"
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

// HoldSlots takes n slots of the overload controller of h's pool named
// pool, as n requests in flight would, and returns what frees them.
func HoldSlots(h *Handler, pool string, n int) (release func()) {
	g := h.current.Load().pools[pool].overload
	var held []overload.Admission
	for range n {
		a, r := g.controller.Admit(context.Background(), overload.Critical, "held")
		if r != overload.Admitted {
			panic("HoldSlots: " + r.String())
		}
		held = append(held, a)
	}
	return func() {
		for i := range held {
			held[i].Release()
		}
	}
}
