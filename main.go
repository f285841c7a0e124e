// Command gateway is an edge reverse proxy with built-in rate limiting.
//
//	gateway [run] [-config gateway.hcl]     serve (the default command)
//	gateway validate [-config gateway.hcl]  check the file, print diagnostics, exit 1 on error
//	gateway hash-key                        print the SHA-256 of the API key read from stdin
//	gateway version                         print the version
//	gateway help                            list the commands (so do -h and --help)
package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	// The IANA zones in the binary: a calendar policy's timezone loads on a
	// machine without zoneinfo (a scratch or distroless image).
	_ "time/tzdata"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/edgegate/gateway/config"
	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	keepHeapFloor()
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
		path, code := configFlag("run", args, stdout, stderr)
		if code >= 0 {
			return code
		}
		return serve(path, stderr, started)
	case "validate":
		path, code := configFlag("validate", args, stdout, stderr)
		if code >= 0 {
			return code
		}
		f, err := config.Load(path, os.LookupEnv)
		if err != nil {
			fmt.Fprint(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok: %d routes, %d policies, %s limiter\n", path, len(f.Proxy.Routes), len(f.Policies), f.Limiter.Kind)
		return 0
	case "hash-key":
		if code := noFlags("hash-key", args, stdout, stderr); code >= 0 {
			return code
		}
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
		if code := noFlags("version", args, stdout, stderr); code >= 0 {
			return code
		}
		fmt.Fprintln(stdout, "gateway", version)
		return 0
	case "help":
		usage(stdout, nil)
		return 0
	}
	fmt.Fprintf(stderr, "gateway: unknown command %q\n", cmd)
	usage(stderr, nil)
	return 2
}

// commands are the CLI's commands, as usage lists them.
var commands = []struct{ name, args, summary string }{
	{"run", "[-config gateway.hcl]", "serve (the default command: gateway -config f runs)"},
	{"validate", "[-config gateway.hcl]", "check the file, print every diagnostic, exit 1 on error"},
	{"hash-key", "", "print the SHA-256 of an API key read from stdin"},
	{"version", "", "print the version"},
	{"help", "", "print this help (so do -h and --help, after a command too)"},
}

// usage lists the commands on w, and then the flags of fs when it has any
// (a command's own help).
func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-40s%s\n", "gateway "+c.name+" "+c.args, c.summary)
	}
	flags := 0
	if fs != nil {
		fs.VisitAll(func(*flag.Flag) { flags++ })
	}
	if flags > 0 {
		fmt.Fprintf(w, "\nflags of %s:\n", fs.Name())
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
}

// parseFlags parses a command's flags. code is -1 to go on; otherwise the
// command is done with that exit code: 0 after -h (its help on stdout),
// 2 after a mistake (told on stderr, with the help).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int) {
	fs.SetOutput(stderr)
	fs.Usage = func() {} // the help is written below, on the right stream
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		usage(stdout, fs)
		return 0
	case err == nil && fs.NArg() > 0:
		fmt.Fprintf(stderr, "gateway %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fallthrough
	case err != nil:
		usage(stderr, fs)
		return 2
	}
	return -1
}

// configFlag reads -config, the one flag of run and validate.
func configFlag(name string, args []string, stdout, stderr io.Writer) (path string, code int) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	p := fs.String("config", "gateway.hcl", "the HCL configuration `file`")
	code = parseFlags(fs, args, stdout, stderr)
	return *p, code
}

// noFlags checks the arguments of a command that takes none.
func noFlags(name string, args []string, stdout, stderr io.Writer) (code int) {
	return parseFlags(flag.NewFlagSet(name, flag.ContinueOnError), args, stdout, stderr)
}

func serve(path string, stderr io.Writer, started chan<- *gateway) int {
	level := new(slog.LevelVar)
	logger, closeLog := newLogger(stderr, level)
	defer closeLog()
	// What libraries write through the standard logger (quic-go warns
	// there when the kernel caps its UDP buffers) goes into the JSON log,
	// at Warn and without client addresses, not past it onto stderr.
	prevOutput, prevFlags := log.Writer(), log.Flags()
	log.SetOutput(edge.NewErrorLog(logger).Writer())
	log.SetFlags(0)
	defer func() {
		log.SetOutput(prevOutput)
		log.SetFlags(prevFlags)
	}()
	f, err := config.Load(path, os.LookupEnv)
	if err != nil {
		logger.Error("invalid configuration", "file", path, "diagnostics", err.Error())
		return 1
	}
	g := &gateway{path: path, logger: logger, level: level, registry: prometheus.NewRegistry()}
	g.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g.metrics = proxy.NewMetrics(g.registry)
	g.jwksMetrics = subject.NewJWKSMetrics(g.registry)
	g.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_config_reloads_total",
		Help: "Configuration reloads by result (ok, error).",
	}, []string{"result"})
	g.registry.MustRegister(g.reloads)
	for _, result := range []string{"ok", "error"} {
		g.reloads.WithLabelValues(result) // at 0 from the start, for the dashboard
	}
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
	logger.Info("gateway started", "version", version, "http", addrString(g.servers.HTTPAddr()), "https", addrString(g.servers.HTTPSAddr()),
		"admin", addrString(g.servers.AdminAddr()), "routes", len(f.Proxy.Routes), "limiter", f.Limiter.Kind.String())
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
