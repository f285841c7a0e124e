// Command gateway is an edge reverse proxy with built-in rate limiting.
//
//	gateway [run] [-config gateway.hcl]     serve (the default command)
//	gateway validate [-config gateway.hcl]  check the file, print diagnostics, exit 1 on error
//	gateway hash-key                        print the SHA-256 of the API key read from stdin
//	gateway version
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/edgegate/gateway/config"
	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, nil))
}

// run is the whole CLI. started, when not nil, receives the gateway once
// its listeners are bound and its signals are being watched (for tests).
func run(args []string, stdin io.Reader, stdout, stderr io.Writer, started chan<- *gateway) int {
	cmd := "run"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		path, ok := configFlag("run", args, stderr)
		if !ok {
			return 2
		}
		return serve(path, stderr, started)
	case "validate":
		path, ok := configFlag("validate", args, stderr)
		if !ok {
			return 2
		}
		f, err := config.Load(path, os.LookupEnv)
		if err != nil {
			fmt.Fprint(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok: %d routes, %d policies, %s limiter\n", path, len(f.Proxy.Routes), len(f.Policies), f.Limiter.Kind)
		return 0
	case "hash-key":
		line, err := bufio.NewReader(stdin).ReadString('\n')
		key := strings.TrimRight(line, "\r\n")
		if key == "" {
			fmt.Fprintln(stderr, "hash-key: read an API key from standard input:", err)
			return 1
		}
		sum := sha256.Sum256([]byte(key))
		fmt.Fprintln(stdout, hex.EncodeToString(sum[:]))
		return 0
	case "version":
		fmt.Fprintln(stdout, "gateway", version)
		return 0
	case "help", "-h", "--help":
		usage(stdout)
		return 0
	}
	fmt.Fprintf(stderr, "gateway: unknown command %q\n", cmd)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  gateway [run] [-config gateway.hcl]     serve (default command)
  gateway validate [-config gateway.hcl]  check the file, print diagnostics, exit 1 on error
  gateway hash-key                        print the SHA-256 of an API key read from stdin
  gateway version
`)
}

func configFlag(name string, args []string, stderr io.Writer) (string, bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "gateway.hcl", "the HCL configuration `file`")
	if err := fs.Parse(args); err != nil {
		return "", false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gateway %s: unexpected argument %q\n", name, fs.Arg(0))
		return "", false
	}
	return *path, true
}

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
	file      *config.File
	cfg       proxy.Config // in force, to go back to when a reload fails half-way

	publicAddr, httpsAddr, adminAddr net.Addr
}

func serve(path string, stderr io.Writer, started chan<- *gateway) int {
	level := new(slog.LevelVar)
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	f, err := config.Load(path, os.LookupEnv)
	if err != nil {
		logger.Error("invalid configuration", "file", path, "diagnostics", err.Error())
		return 1
	}
	g := &gateway{path: path, logger: logger, level: level, registry: prometheus.NewRegistry()}
	g.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g.metrics = proxy.NewMetrics(g.registry)
	g.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_config_reloads_total",
		Help: "Configuration reloads by result (ok, error).",
	}, []string{"result"})
	g.registry.MustRegister(g.reloads)
	if err := g.start(f); err != nil {
		logger.Error("cannot start", "error", err.Error())
		if g.backend != nil {
			g.backend.Close()
		}
		return 1
	}
	// Watch signals before anyone is told we are up, so a SIGHUP sent right
	// after start-up is a reload, not the default action (exit).
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	logger.Info("gateway started", "version", version, "http", addrString(g.publicAddr), "https", addrString(g.httpsAddr),
		"admin", addrString(g.adminAddr), "routes", len(f.Proxy.Routes), "limiter", f.Limiter.Kind.String())
	if started != nil {
		started <- g
	}
	for {
		select {
		case sig := <-signals:
			if sig == syscall.SIGHUP {
				g.reload()
				continue
			}
			logger.Info("draining", "signal", sig.String())
			return g.shutdown()
		case err := <-g.serveErr:
			logger.Error("listener failed", "error", err.Error())
			g.shutdown()
			return 1
		}
	}
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
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
	if g.cfg, err = g.proxyConfig(f); err != nil {
		return err
	}
	if g.handler, err = proxy.NewHandler(proxy.Options{Logger: g.logger, AccessLog: f.Log.Access, Metrics: g.metrics}, g.cfg); err != nil {
		return err
	}
	eo := f.Listen
	eo.Logger = g.logger
	if g.servers, err = edge.Listen(eo, g.handler, proxy.AdminHandler(g.backend.Ready, g.registry)); err != nil {
		return err
	}
	g.publicAddr, g.httpsAddr, g.adminAddr = g.servers.HTTPAddr(), g.servers.HTTPSAddr(), g.servers.AdminAddr()
	g.serveErr = g.servers.Serve()
	g.file = f
	return nil
}

// proxyConfig is the request path's configuration for f, on the backend
// the gateway owns.
func (g *gateway) proxyConfig(f *config.File) (proxy.Config, error) {
	so := f.Subject
	if len(so.PseudonymKeys) == 0 {
		if g.ephemeral == nil {
			return proxy.Config{}, errors.New("a pseudonym block cannot be removed by a reload; restart instead")
		}
		so.PseudonymKeys, so.PseudonymVersion = map[int][]byte{1: g.ephemeral}, 1
	}
	resolver, err := subject.NewResolver(so)
	if err != nil {
		return proxy.Config{}, err
	}
	cfg := f.Proxy
	cfg.Resolver, cfg.Limiter = resolver, g.backend
	return cfg, nil
}

// reload applies the file again. An invalid file changes nothing; requests
// in flight finish on the configuration they started with.
func (g *gateway) reload() {
	f, err := config.Load(g.path, os.LookupEnv)
	var cfg proxy.Config
	if err == nil {
		cfg, err = g.proxyConfig(f)
	}
	if err == nil {
		err = g.handler.Swap(cfg)
		if err == nil {
			if err = g.servers.SwapCertificates(certificateFiles(f)); err != nil {
				g.handler.Swap(g.cfg) // compiled once already: it cannot fail
			}
		}
	}
	if err != nil {
		g.reloads.WithLabelValues("error").Inc()
		g.logger.Error("reload refused: the old configuration stays", "file", g.path, "error", err.Error())
		return
	}
	if f.RestartNeeded(g.file) {
		g.logger.Warn("listen addresses and the limiter backend change on restart only")
	}
	g.level.Set(f.Log.Level)
	g.file, g.cfg = f, cfg
	g.reloads.WithLabelValues("ok").Inc()
	g.logger.Info("configuration reloaded", "routes", len(f.Proxy.Routes), "policies", len(f.Policies))
}

func certificateFiles(f *config.File) []edge.CertificateFiles {
	if f.Listen.TLS == nil {
		return nil
	}
	return f.Listen.TLS.Certificates
}

// shutdown stops accepting and lets requests in flight finish within the
// shutdown timeout; past it, connections are closed.
func (g *gateway) shutdown() int {
	code := 0
	if err := g.servers.Shutdown(); err != nil {
		g.logger.Warn("drain timed out; connections were closed", "error", err.Error())
		code = 1
	}
	g.backend.Close()
	g.logger.Info("gateway stopped")
	return code
}
