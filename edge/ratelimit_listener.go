package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
)

// GRPCServer is what the rate limit listener serves: a *grpc.Server (edge
// serves it without knowing gRPC).
type GRPCServer interface {
	Serve(net.Listener) error
	// GracefulStop stops accepting and waits for the calls in flight;
	// Stop ends them at once.
	GracefulStop()
	Stop()
}

// ServeRateLimit makes srv the server of the rate limit listener
// (Options.RateLimitGRPC), from Serve on. Call it between Listen and
// Serve; without that listener it does nothing.
func (s *Servers) ServeRateLimit(srv GRPCServer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rateLimitLn != nil && !s.serving {
		s.rateLimit = srv
	}
}

// RateLimitAddr is the bound address of the rate limit listener, nil
// without one.
func (s *Servers) RateLimitAddr() net.Addr { return addr(s.rateLimitLn) }

// serveRateLimit serves the rate limit listener until Shutdown or Close,
// like serveOn: with RateLimitGRPCTLS, over TLS with the HTTPS listener's
// certificates (and its client certificate demands), speaking only h2.
func (s *Servers) serveRateLimit() {
	if s.rateLimit == nil {
		return
	}
	ln := s.rateLimitLn
	if s.opts.RateLimitGRPCTLS {
		ln = tls.NewListener(ln, grpcConfig(s.tls.config()))
	}
	srv := s.rateLimit
	s.running.Go(func() {
		// Serve returns nil after GracefulStop or Stop.
		if err := srv.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) {
			s.errs <- fmt.Errorf("edge: ratelimit_grpc: %w", err)
		}
	})
}

// grpcConfig is cfg for gRPC: HTTP/2 the only protocol offered.
func grpcConfig(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	return cfg
}

// stopRateLimit lets the calls in flight finish until ctx ends, then ends
// the rest.
func (s *Servers) stopRateLimit(ctx context.Context) error {
	if s.rateLimit == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		s.rateLimit.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.rateLimit.Stop()
		<-done
		return errors.New("edge: drain ratelimit_grpc: calls still in flight at the shutdown timeout were ended")
	}
}
