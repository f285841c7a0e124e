// Package legacymodel is a loopback model of a legacy backend and an open
// loop of tenants to offer it load through a gateway: what the overload
// test of package proxy and the bench command bench/overload share.
package legacymodel

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Backend models a legacy backend: workers serving one request each for
// Service, and a FIFO of requests in front of them (goroutines waiting on
// a channel are served in order), so its latency grows with the load it
// is sent, as a thread pool with a backlog does; it is no sleep
// proportional to load.
type Backend struct {
	URL     string
	Service time.Duration
	server  *http.Server
	workers chan struct{} // a token per free worker

	mu    sync.Mutex
	taken int // workers Halve took out

	served atomic.Int64
	busy   atomic.Int64 // nanoseconds workers spent on requests
}

// NewBackend starts a backend of workers on a loopback port.
func NewBackend(workers int, service time.Duration) (*Backend, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Backend{URL: "http://" + l.Addr().String(), Service: service, workers: make(chan struct{}, workers)}
	for range workers {
		b.workers <- struct{}{}
	}
	b.server = &http.Server{Handler: http.HandlerFunc(b.serve)}
	go b.server.Serve(l)
	return b, nil
}

func (b *Backend) serve(w http.ResponseWriter, r *http.Request) {
	select {
	case <-b.workers:
	case <-r.Context().Done():
		return
	}
	start := time.Now()
	time.Sleep(b.Service)
	b.busy.Add(int64(time.Since(start)))
	b.served.Add(1)
	b.workers <- struct{}{}
	w.Write([]byte("done"))
}

// Capacity is the requests a second the backend serves with every worker.
func (b *Backend) Capacity() float64 {
	return float64(cap(b.workers)) * float64(time.Second) / float64(b.Service)
}

// Served is the requests served so far, and the time workers spent on
// them: on a machine short of CPU a worker's Service runs over, and the
// backend serves less than Capacity.
func (b *Backend) Served() (int64, time.Duration) {
	return b.served.Load(), time.Duration(b.busy.Load())
}

// Halve takes half the workers out, as they come free.
func (b *Backend) Halve() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range cap(b.workers)/2 - b.taken {
		<-b.workers
		b.taken++
	}
}

// Restore gives back the workers Halve took.
func (b *Backend) Restore() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ; b.taken > 0; b.taken-- {
		b.workers <- struct{}{}
	}
}

// Close stops the backend.
func (b *Backend) Close() error {
	b.Restore()
	return b.server.Close()
}
