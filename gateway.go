package main

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"

	"github.com/edgegate/gateway/config"
	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/telemetry"
)

// gateway is one running instance: its servers, its handler and what
// survives a reload (the limiter backend and its counters, the ephemeral
// pseudonym key, the metrics).
type gateway struct {
	path     string
	logger   *slog.Logger
	level    *slog.LevelVar
	registry *prometheus.Registry
	metrics  *proxy.Metrics
	reloads  *prometheus.CounterVec
	backend  limiter.Backend
	handler  *proxy.Handler
	servers  *edge.Servers
	serveErr <-chan error
	// ephemeral signs pseudonyms when the file has no pseudonym block; it
	// lives as long as the process so a reload keeps every budget.
	ephemeral []byte
	// jwks is the jwks_url key set; it outlives a reload that keeps the
	// URL, so the last good keys stay while the identity provider is down.
	jwks        *subject.RemoteKeys
	jwksMetrics *subject.JWKSMetrics
	file        *config.File
	draining    atomic.Bool
	// tracing exports spans when the file has a telemetry block; nil
	// otherwise. It lives as long as the process: telemetry changes on
	// restart only.
	tracing *telemetry.Tracing
}

// start builds every part from f, binds the listeners and serves.
func (g *gateway) start(f *config.File) error {
	g.level.Set(f.Log.Level)
	lo := f.Limiter
	lo.Registerer, lo.Logger = g.registry, g.logger
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	backend, err := limiter.Open(ctx, lo)
	cancel()
	if err != nil {
		return err
	}
	g.backend = backend
	if len(f.Subject.PseudonymKeys) == 0 {
		g.ephemeral = make([]byte, 32)
		rand.Read(g.ephemeral)
		g.logger.Warn("no pseudonym block: pseudonyms use a random key that lives as long as this process")
	}
	cfg, err := g.proxyConfig(f)
	if err != nil {
		return err
	}
	po := proxy.Options{Logger: g.logger, AccessLog: f.Log.Access, Metrics: g.metrics}
	if f.Telemetry != nil {
		to := *f.Telemetry
		to.ServiceVersion = version
		if g.tracing, err = telemetry.New(to); err != nil {
			return err
		}
		// The SDK reports what it could not export here, from its own
		// goroutines; without this it would write to stderr past the
		// JSON log.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			g.logger.Warn("telemetry: spans not exported", "error", err.Error())
		}))
		po.Tracer = g.tracing.Tracer()
	}
	if g.handler, err = proxy.NewHandler(po, cfg); err != nil {
		return err
	}
	eo := f.Listen
	eo.Logger, eo.Registerer = g.logger, g.registry
	if g.servers, err = edge.Listen(eo, g.handler, withProfiling(proxy.AdminHandler(g.ready, g.registry, g.handler.AdminAPI()))); err != nil {
		return err
	}
	if eo.RateLimitGRPC != "" {
		g.servers.ServeRateLimit(proxy.NewRLSServer(g.handler))
	}
	g.serveErr = g.servers.Serve()
	g.file = f
	return nil
}

// ready is /readyz: not while draining, so that a load balancer stops
// sending before the listeners close, and not while the limiter cannot
// decide.
func (g *gateway) ready(ctx context.Context) error {
	if g.draining.Load() {
		return errors.New("draining")
	}
	return g.backend.Ready(ctx)
}

// proxyConfig is the request path's configuration for f, on the backend
// the gateway owns.
func (g *gateway) proxyConfig(f *config.File) (proxy.Config, error) {
	so := f.Subject
	so.TLSFingerprint = edge.JA4Of
	if len(so.PseudonymKeys) == 0 {
		if g.ephemeral == nil {
			return proxy.Config{}, errors.New("a pseudonym block cannot be removed by a reload; restart instead")
		}
		so.PseudonymKeys, so.PseudonymVersion = map[int][]byte{1: g.ephemeral}, 1
	}
	if so.JWT != nil && so.JWT.JWKSURL != "" {
		j := *so.JWT
		keys, err := g.remoteKeys(j.JWKSURL)
		if err != nil {
			return proxy.Config{}, err
		}
		j.Keys, so.JWT = keys, &j
	}
	resolver, err := subject.NewResolver(so)
	if err != nil {
		return proxy.Config{}, err
	}
	cfg := f.Proxy
	cfg.Resolver, cfg.Limiter = resolver, g.backend
	return cfg, nil
}

// remoteKeys is the key set at url, fetched now: at start, and on every
// reload, so SIGHUP is how an operator makes the gateway see a rotation at
// once. A fetch that fails is logged and changes nothing: the last good
// set stays, and a set never fetched answers tokens 503 until a token with
// a key ID fetches it (at most once per 10 s).
func (g *gateway) remoteKeys(url string) (*subject.RemoteKeys, error) {
	keys := g.jwks
	if keys == nil || keys.URL() != url {
		var err error
		if keys, err = subject.NewRemoteKeys(subject.RemoteKeysOptions{URL: url, Logger: g.logger, Metrics: g.jwksMetrics}); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := keys.Refresh(ctx); err != nil {
		g.logger.Error("jwks_url could not be fetched; tokens are checked against the last good key set, or answered 503 until there is one",
			"jwks_url", url, "error", err.Error())
	}
	g.jwks = keys
	return keys, nil
}

// reload applies the file again. An invalid file changes nothing; requests
// in flight finish on the configuration they started with.
func (g *gateway) reload() {
	f, err := config.Load(g.path, os.LookupEnv)
	var cfg proxy.Config
	if err == nil {
		cfg, err = g.proxyConfig(f)
	}
	// Certificates first: reading them is what a sound file can still fail
	// at, and until both swaps succeed nothing new may serve. A file without
	// TLS keeps the running HTTPS listener's certificates (that listener
	// goes on restart only).
	if err == nil && f.Listen.TLS != nil {
		err = g.servers.SwapCertificates(f.Listen.TLS.Certificates)
	}
	if err == nil {
		if err = g.handler.Swap(cfg); err != nil && f.Listen.TLS != nil && g.file.Listen.TLS != nil {
			g.servers.SwapCertificates(g.file.Listen.TLS.Certificates)
		}
	}
	if err == nil && f.Listen.TLS != nil {
		// The handler's resolver believes the new roots already; from now
		// on handshakes ask for them too.
		g.servers.SwapClientCAs(f.Listen.TLS.ClientCAs)
	}
	if err != nil {
		g.reloads.WithLabelValues("error").Inc()
		g.logger.Error("reload refused: the old configuration stays", "file", g.path, "error", err.Error())
		return
	}
	if f.RestartNeeded(g.file) {
		g.logger.Warn("listen addresses, asking for client certificates (client_auth), the limiter backend and telemetry change on restart only")
	}
	g.level.Set(f.Log.Level)
	g.file = f
	g.reloads.WithLabelValues("ok").Inc()
	g.logger.Info("configuration reloaded", "routes", len(f.Proxy.Routes), "policies", len(f.Policies))
}

// shutdown stops accepting and lets requests in flight finish within the
// shutdown timeout; past it, connections are closed.
func (g *gateway) shutdown() int {
	g.draining.Store(true)
	drainEnds := time.Now().Add(g.servers.ShutdownTimeout())
	code := 0
	if err := g.servers.Shutdown(); err != nil {
		g.logger.Warn("drain timed out; connections were closed", "error", err.Error())
		code = 1
	}
	g.handler.Close()
	if g.tracing != nil {
		// The spans of the last requests go out within the drain's time,
		// or are dropped: exit comes no later for them.
		ctx, cancel := context.WithDeadline(context.Background(), drainEnds)
		if err := g.tracing.Shutdown(ctx); err != nil {
			g.logger.Warn("telemetry: spans still queued when the drain ended were dropped", "error", err.Error())
		}
		cancel()
	}
	g.backend.Close()
	g.logger.Info("gateway stopped")
	return code
}
