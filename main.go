// Command gateway is an edge reverse proxy with built-in rate limiting.
//
//	gateway [run] [-config gateway.hcl]     serve (the default command)
//	gateway validate [-config gateway.hcl]  check the file, print diagnostics, exit 1 on error
//	gateway hash-key                        print the SHA-256 of the API key read from stdin
//	gateway version
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

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
		f, diags, sources := config.Load(path)
		config.WriteDiagnostics(stderr, sources, diags)
		if diags.HasErrors() {
			fmt.Fprintf(stderr, "%s: %d error(s)\n", path, countErrors(diags))
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok: %d routes, %d policies, %s limiter\n", path, len(f.Routes), len(f.Policies), f.Limiter.Backend)
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

func countErrors(diags hcl.Diagnostics) int {
	n := 0
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			n++
		}
	}
	return n
}

func diagnosticsText(sources map[string][]byte, diags hcl.Diagnostics) string {
	var b bytes.Buffer
	config.WriteDiagnostics(&b, sources, diags)
	return b.String()
}

// gateway is one running instance: its listeners, its handler and what
// survives a reload (the memory limiter's counters, the ephemeral pseudonym
// key, the metrics).
type gateway struct {
	path     string
	logger   *slog.Logger
	level    *slog.LevelVar
	registry *prometheus.Registry
	metrics  *proxy.Metrics
	reloads  *prometheus.CounterVec
	handler  *proxy.Handler
	backend  backend
	// ephemeral signs pseudonyms when the file has no pseudonym block; it
	// lives as long as the process so a reload keeps every budget.
	ephemeral []byte
	file      *config.File

	tls                              *edge.TLS // nil without a tls block
	stopACME                         context.CancelFunc
	acmeDone                         chan struct{} // closed when the first issuance ends
	plain, secure, admin             *http.Server
	publicAddr, httpsAddr, adminAddr net.Addr
	serveErr                         chan error
}

// redisLogger carries go-redis's own messages (pool and dial trouble,
// about servers, never clients) into the JSON log.
type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(ctx context.Context, format string, v ...any) {
	r.l.Log(ctx, slog.LevelWarn, "redis client", "detail", fmt.Sprintf(format, v...))
}

// backend is a limiter backend the gateway owns: it lives across reloads.
type backend interface {
	proxy.Limiter
	Close() error
}

func serve(path string, stderr io.Writer, started chan<- *gateway) int {
	level := new(slog.LevelVar)
	logger := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))
	f, diags, sources := config.Load(path)
	if diags.HasErrors() {
		logger.Error("invalid configuration", "file", path, "diagnostics", diagnosticsText(sources, diags))
		return 1
	}
	g := &gateway{path: path, logger: logger, level: level, registry: prometheus.NewRegistry(), serveErr: make(chan error, 2)}
	g.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g.metrics = proxy.NewMetrics(g.registry)
	g.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_config_reloads_total",
		Help: "Configuration reloads by result (ok, error).",
	}, []string{"result"})
	g.registry.MustRegister(g.reloads)
	if err := g.start(f); err != nil {
		logger.Error("cannot start", "error", err.Error())
		g.closeLimiter()
		return 1
	}
	// Watch signals before anyone is told we are up, so a SIGHUP sent right
	// after start-up is a reload, not the default action (exit).
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	logger.Info("gateway started", "version", version, "http", addrString(g.publicAddr), "https", addrString(g.httpsAddr), "admin", addrString(g.adminAddr),
		"routes", len(f.Routes), "limiter", f.Limiter.Backend)
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
			logger.Info("draining", "signal", sig.String(), "timeout", g.file.Listen.ShutdownTimeout.String())
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

func (g *gateway) start(f *config.File) error {
	g.setLevel(f.Log.Level)
	switch f.Limiter.Backend {
	case "memory":
		m := limiter.NewMemory(limiter.MemoryOptions{MaxEntries: f.Limiter.MemoryMaxEntries})
		g.backend = m
		g.registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_limiter_evictions_total",
			Help: "Live limiter keys dropped because the memory backend was full; each gave a subject a fresh budget early.",
		}, func() float64 { return float64(m.Evictions()) }))
	case "redis":
		// go-redis logs through one process-wide logger; send it to ours.
		redis.SetLogger(redisLogger{g.logger})
		rc := f.Limiter.Redis
		opts := limiter.RedisOptions{
			Mode: limiter.RedisMode(rc.Mode), Addrs: rc.Addrs, MasterName: rc.MasterName,
			Username: rc.Username, Password: rc.Password, DB: rc.DB, KeyPrefix: rc.KeyPrefix,
			Registerer: g.registry,
		}
		if rc.TLS {
			opts.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
			if rc.TLSCAFile != "" {
				pemBytes, err := os.ReadFile(rc.TLSCAFile)
				if err != nil {
					return fmt.Errorf("redis tls_ca_file: %w", err)
				}
				opts.TLS.RootCAs = x509.NewCertPool()
				if !opts.TLS.RootCAs.AppendCertsFromPEM(pemBytes) {
					return fmt.Errorf("redis tls_ca_file %s holds no PEM certificate", rc.TLSCAFile)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := limiter.NewRedis(ctx, opts)
		cancel()
		if err != nil {
			return fmt.Errorf("limiter backend redis: %w", err)
		}
		g.backend = r
	default:
		return fmt.Errorf("unknown limiter backend %q", f.Limiter.Backend)
	}
	if f.Pseudonym == nil {
		g.ephemeral = make([]byte, 32)
		rand.Read(g.ephemeral)
		g.logger.Warn("no pseudonym block: pseudonyms use a random key that lives as long as this process")
	}
	cfg, err := g.proxyConfig(f)
	if err != nil {
		return err
	}
	g.handler, err = proxy.NewHandler(proxy.Options{Logger: g.logger, AccessLog: f.Log.Access, Metrics: g.metrics}, cfg)
	if err != nil {
		return err
	}
	g.file = f

	l := f.Listen
	// Bind first: ACME challenges must be answered on the ports these
	// sockets really have.
	var httpLn, httpsLn net.Listener
	if l.HTTP != "" {
		if httpLn, err = net.Listen("tcp", l.HTTP); err != nil {
			return fmt.Errorf("listen http: %w", err)
		}
		g.publicAddr = httpLn.Addr()
	}
	if f.TLS != nil {
		if httpsLn, err = net.Listen("tcp", l.HTTPS); err != nil {
			closeAll(httpLn)
			return fmt.Errorf("listen https: %w", err)
		}
		g.httpsAddr = httpsLn.Addr()
		if err := g.buildTLS(f.TLS, httpLn, httpsLn); err != nil {
			closeAll(httpLn, httpsLn)
			return err
		}
	}
	var publicHTTP http.Handler = g.handler
	if g.tls != nil {
		g.secure = g.newServer(edge.HSTS(g.handler, f.TLS.HSTSMaxAge, f.TLS.HSTSIncludeSubdomains))
		// The framing listener terminates TLS itself; TLSConfig stays set so
		// that Serve offers HTTP/2 on the connections it hands over.
		g.secure.TLSConfig = g.tls.Config()
		go g.serveOn(g.secure, edge.FramingListener(edge.LimitListener(httpsLn, l.MaxConnections), g.secure.TLSConfig, l.ReadHeaderTimeout))
		if f.TLS.RedirectHTTP {
			publicHTTP = edge.Redirect(port(httpsLn))
		}
		publicHTTP = g.tls.HTTPChallenge(publicHTTP)
	}
	if httpLn != nil {
		g.plain = g.newServer(publicHTTP)
		go g.serveOn(g.plain, edge.FramingListener(edge.LimitListener(httpLn, l.MaxConnections), nil, 0))
	}
	if l.Admin != "" {
		g.admin = &http.Server{
			Handler:           proxy.AdminHandler(g.handler.Ready, g.registry),
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       time.Minute,
			ErrorLog:          slog.NewLogLogger(g.logger.Handler(), slog.LevelWarn),
		}
		aln, err := net.Listen("tcp", l.Admin)
		if err != nil {
			g.closeServers()
			return fmt.Errorf("listen admin: %w", err)
		}
		g.adminAddr = aln.Addr()
		go g.serveOn(g.admin, aln)
	}
	if g.tls != nil {
		// Certificates are obtained once the HTTP listener can answer
		// HTTP-01; until then the HTTPS listener has no certificate for
		// those names. Renewals continue in the background.
		ctx, cancel := context.WithCancel(context.Background())
		g.stopACME, g.acmeDone = cancel, make(chan struct{})
		go func() {
			defer close(g.acmeDone)
			if err := g.tls.Manage(ctx); err != nil && ctx.Err() == nil {
				g.logger.Error("acme: cannot obtain certificates", "error", err.Error())
			}
		}()
	}
	return nil
}

func (g *gateway) buildTLS(t *config.TLS, httpLn, httpsLn net.Listener) error {
	static, err := edge.LoadCertificates(certificateFiles(t))
	if err != nil {
		return err
	}
	var acme *edge.ACMEOptions
	if a := t.ACME; a != nil {
		acme = &edge.ACMEOptions{Domains: a.Domains, Email: a.Email, CA: a.CA, CARoot: a.CARoot, Storage: a.Storage,
			Logger: g.logger, TLSPort: port(httpsLn)}
		allowed := func(c string) bool { return len(a.Challenges) == 0 || slices.Contains(a.Challenges, c) }
		if httpLn != nil && allowed("http-01") {
			acme.HTTPPort = port(httpLn)
		}
		if !allowed("tls-alpn-01") {
			acme.TLSPort = 0
		}
	}
	g.tls, err = edge.NewTLS(static, acme)
	return err
}

func port(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }

func closeAll(ls ...net.Listener) {
	for _, l := range ls {
		if l != nil {
			l.Close()
		}
	}
}

// newServer is a public server with the edge timeouts of the listen block;
// a request with both Content-Length and Transfer-Encoding gets 400.
func (g *gateway) newServer(h http.Handler) *http.Server {
	l := g.file.Listen
	return &http.Server{
		Handler:           edge.RejectConflictingFraming(h),
		ConnContext:       edge.ConnContext,
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(g.logger.Handler(), slog.LevelWarn),
	}
}

func certificateFiles(t *config.TLS) []edge.CertificateFiles {
	var files []edge.CertificateFiles
	for _, c := range t.Certificates {
		files = append(files, edge.CertificateFiles{CertFile: c.CertFile, KeyFile: c.KeyFile})
	}
	return files
}

func (g *gateway) closeServers() {
	for _, s := range []*http.Server{g.plain, g.secure, g.admin} {
		if s != nil {
			s.Close()
		}
	}
}

// serveOn serves ln until Shutdown; any other end is a listener failure.
func (g *gateway) serveOn(s *http.Server, ln net.Listener) {
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		g.serveErr <- err
	}
}

// proxyConfig builds the request path's configuration from a file.
func (g *gateway) proxyConfig(f *config.File) (proxy.Config, error) {
	keys, active := map[int][]byte{1: g.ephemeral}, 1
	if f.Pseudonym != nil {
		keys, active = f.Pseudonym.Keys, f.Pseudonym.Version
	} else if g.ephemeral == nil {
		return proxy.Config{}, errors.New("a pseudonym block cannot be removed by a reload; restart instead")
	}
	p, err := subject.NewPseudonymizer(keys, active)
	if err != nil {
		return proxy.Config{}, err
	}
	so := f.Subject
	so.Pseudonymizer = p
	resolver, err := subject.NewResolver(so)
	if err != nil {
		return proxy.Config{}, err
	}
	return proxy.Config{
		Routes:            f.Routes,
		Resolver:          resolver,
		Limiter:           g.backend,
		Deadline:          f.Limiter.Deadline,
		FailureRetryAfter: f.Limiter.FailureRetryAfter,
	}, nil
}

// reload applies the file again. An invalid file changes nothing; requests
// in flight finish on the configuration they started with.
func (g *gateway) reload() {
	f, diags, sources := config.Load(g.path)
	if diags.HasErrors() {
		g.reloads.WithLabelValues("error").Inc()
		g.logger.Error("reload refused: the old configuration stays", "file", g.path, "diagnostics", diagnosticsText(sources, diags))
		return
	}
	var certs []tls.Certificate
	var err error
	if g.tls != nil && f.TLS != nil {
		certs, err = edge.LoadCertificates(certificateFiles(f.TLS))
	}
	var cfg proxy.Config
	if err == nil {
		cfg, err = g.proxyConfig(f)
	}
	if err == nil {
		err = g.handler.Swap(cfg)
	}
	if err == nil && g.tls != nil {
		g.tls.Static.Swap(certs)
	}
	if err != nil {
		g.reloads.WithLabelValues("error").Inc()
		g.logger.Error("reload refused: the old configuration stays", "file", g.path, "error", err.Error())
		return
	}
	if old := g.file; old.Listen != f.Listen || old.Limiter.Backend != f.Limiter.Backend ||
		old.Limiter.MemoryMaxEntries != f.Limiter.MemoryMaxEntries || !reflect.DeepEqual(old.Limiter.Redis, f.Limiter.Redis) {
		g.logger.Warn("listen addresses and the limiter backend change on restart only")
	}
	g.setLevel(f.Log.Level)
	g.file = f
	g.reloads.WithLabelValues("ok").Inc()
	g.logger.Info("configuration reloaded", "routes", len(f.Routes), "policies", len(f.Policies))
}

func (g *gateway) setLevel(s string) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err == nil {
		g.level.Set(l)
	}
}

// shutdown stops accepting and lets requests in flight finish within the
// shutdown timeout; past it, connections are closed.
func (g *gateway) shutdown() int {
	ctx, cancel := context.WithTimeout(context.Background(), g.file.Listen.ShutdownTimeout)
	defer cancel()
	code := 0
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, s := range []*http.Server{g.plain, g.secure} {
		if s == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.Shutdown(ctx); err != nil {
				g.logger.Warn("drain timed out; closing connections", "error", err.Error())
				s.Close()
				mu.Lock()
				code = 1
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if g.admin != nil {
		g.admin.Close()
	}
	if g.stopACME != nil {
		// An issuance still under way is abandoned, not waited for.
		g.stopACME()
		<-g.acmeDone
	}
	if g.tls != nil {
		g.tls.Stop()
	}
	g.closeLimiter()
	g.logger.Info("gateway stopped")
	return code
}

func (g *gateway) closeLimiter() {
	if g.backend != nil {
		g.backend.Close()
	}
}
