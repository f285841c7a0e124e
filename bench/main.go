// Command bench is the gateway's load harness. One command builds the
// gateway, starts every target on loopback, drives them with wrk in
// interleaved rounds and prints a markdown table:
//
//	go run ./bench                      # main mode: what the gateway costs per request
//	go run ./bench -mode flood          # one subject far over its limit
//	go run ./bench -subjects 100000     # also each gateway from 100,000 clients (X-Forwarded-For)
//	go run ./bench -rounds 5 -duration 10s -conns 64,512,1024
//	go run ./bench -targets gateway-redis -conns 64 -profile /tmp/prof   # where its CPU time goes
//	go run ./bench -mode soak -duration 10m  # leaks through Redis restarts (soak.go)
//	go run ./bench -mode protocols      # the gateway's CPU per request over HTTP/3 against HTTP/2 (protocols.go)
//	go run ./bench -mode rls            # the rate limit service's decisions/s, p99 and CPU per decision (rls.go)
//	go run ./bench -mode scale          # 8 gateways on a 3-master Redis Cluster: Redis calls and CPU per decision, per shard (scale.go)
//
// The targets, in the order each round drives them:
//
//	upstream-direct  the harness's own upstream, no proxy: the load side's ceiling
//	bare-proxy       httputil.ReverseProxy with Rewrite + SetURL and a pooled Transport: the floor
//	gateway-memory   the gateway, memory limiter
//	gateway-redis    the gateway, Redis limiter on a private redis-server
//	gateway-redis-inflight  the Redis gateway with a concurrency policy (main mode)
//	gateway-redis-lease     the Redis gateway, its fixed window with lease = 50 (main mode)
//	nginx            nginx with limit_req, when nginx is installed
//
// Every proxy runs on CPU 0 (taskset -c 0); the load generator, the
// upstream and redis-server share CPU 1, so nothing else the harness starts
// competes with the proxy under test. Other jobs on the machine can: the
// "other CPU" column says how much they took. Everything the harness
// starts is stopped at the end and on Ctrl-C, and its temporary folder is
// removed.
//
// The harness runs itself again for the processes it needs besides wrk,
// nginx, redis-server and the gateway: `bench internal-upstream`,
// `bench internal-bare-proxy` and `bench internal-load` (the Go load
// generator used when wrk is missing). They are not meant to be run by hand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && strings.HasPrefix(os.Args[1], "internal-") {
		os.Exit(runRole(os.Args[1], os.Args[2:]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// settings are the harness's flags, checked.
type settings struct {
	modes    []string // "main", "flood", in order
	rounds   int
	duration time.Duration
	warmup   time.Duration
	conns    []int
	loader   string          // "auto", "wrk" or "go"
	only     map[string]bool // targets to drive; empty drives all
	repo     string          // the gateway module's root
	baseline string          // another checkout's module root, whose gateway runs beside each gateway target; "" for none
	keep     bool            // keep the temporary folder
	dedup    bool            // the gateways' policy de-duplicates evaluations
	subjects int             // main mode, above 1: each gateway is also driven from a rotation of this many client addresses
	profile  string          // a folder for the gateways' CPU profiles; "" for none
	syscalls bool            // count each target's syscalls with perf stat
	soak     soakSettings
	args     []string // as given, for the report
}

func parseSettings(args []string, stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("mode", "main", "`main` (a limit that never denies), flood (one subject over a 5/min limit), both, protocols (CPU per request over HTTP/3 against HTTP/2), rls (the rate limit service over gRPC), scale (8 gateways on a 3-master Redis Cluster) or soak (leaks through Redis restarts)")
	rounds := fs.Int("rounds", 3, "interleaved rounds; every figure is the median over them")
	duration := fs.Duration("duration", 8*time.Second, "length of one load run; in soak mode the soak's, default 3m, at most 1h")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured load on each target before the first round")
	conns := fs.String("conns", "64,512", "comma-separated connection counts, each a run per target and round; in scale mode the total over the gateways, default 64")
	loader := fs.String("loader", "auto", "`auto` (wrk when installed, else the Go generator), wrk or go")
	targets := fs.String("targets", "", "comma-separated targets to drive (default all): "+strings.Join(targetOrder, ", "))
	repo := fs.String("repo", ".", "a folder inside the gateway module")
	baseline := fs.String("baseline", "", "main and flood: a `folder` inside another checkout of the gateway (a git worktree of an older commit, say); its build runs beside each gateway target as <target>@<commit>, and each round's ratios compare the two")
	dedup := fs.Bool("dedup", true, "leave the gateways' policy de-duplication on (its default); -dedup=false to see what it costs")
	profile := fs.String("profile", "", "after the rounds, have each gateway (built with -tags pprof) take a CPU profile of itself during one more run per connection count, into this `folder`")
	syscalls := fs.Bool("syscalls", false, "main and flood: count each target's system calls per request with perf stat (Debian: linux-perf), on the load CPU")
	keep := fs.Bool("keep", false, "keep the temporary folder (configurations, logs) and print its path")
	var soak soakSettings
	fs.DurationVar(&soak.restartEvery, "restart-every", 45*time.Second, "soak: kill and restart redis-server this often")
	fs.DurationVar(&soak.down, "down", 2*time.Second, "soak: how long redis-server stays dead at each restart")
	fs.DurationVar(&soak.flushEvery, "flush-every", 10*time.Second, "soak: send SCRIPT FLUSH this often")
	fs.DurationVar(&soak.reportEvery, "report-every", 30*time.Second, "soak: print the figures this often")
	fs.DurationVar(&soak.settle, "settle", 20*time.Second, "soak: quiet time before the start and end figures (longer than the keys live)")
	subjects := fs.Int("subjects", 0, "main: also drive each gateway from a rotation of this many client addresses in X-Forwarded-For (from the load side, a trusted proxy), e.g. 100000; soak: subjects, each from its own loopback address (default 8)")
	fs.IntVar(&soak.rate, "rate", 10, "soak: requests a second per subject (twice the policy's limit at 10)")
	if err := fs.Parse(args); err != nil {
		return settings{}, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if fs.NArg() > 0 {
		return settings{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	s := settings{rounds: *rounds, duration: *duration, warmup: *warmup, loader: *loader, keep: *keep, dedup: *dedup,
		profile: *profile, syscalls: *syscalls, soak: soak, args: args, only: map[string]bool{}}
	s.soak.subjects = 8
	switch {
	case *mode == "soak" && set["subjects"]:
		s.soak.subjects = *subjects
	case set["subjects"]:
		if *subjects < 1 || *subjects > maxSubjects {
			return s, fmt.Errorf("-subjects must be 1 to %d", maxSubjects)
		}
		s.subjects = *subjects
	}
	switch *mode {
	case "main", "flood":
		s.modes = []string{*mode}
	case "both":
		s.modes = []string{"main", "flood"}
	case "protocols":
		s.modes = []string{"protocols"}
		s.only["gateway-memory"] = true
	case "rls":
		s.modes = []string{"rls"}
		s.only["gateway-memory"], s.only["gateway-redis"] = true, true
	case "scale":
		// It starts its own Cluster and gateways: none of the targets.
		s.modes = []string{"scale"}
		s.only["scale"] = true
		if !set["conns"] {
			*conns = "64"
		}
	case "soak":
		s.modes = []string{"soak"}
		s.only["gateway-redis"] = true
		if !set["duration"] {
			s.duration = 3 * time.Minute
		}
		if s.duration > time.Hour {
			return s, errors.New("-duration: a soak lasts at most 1h")
		}
		if s.soak.subjects < 1 || s.soak.subjects > 250 || soak.rate < 1 {
			return s, errors.New("-subjects must be 1 to 250 and -rate at least 1")
		}
		if soak.down < 0 || soak.down > soak.restartEvery/2 {
			return s, errors.New("-down must be between 0 and half of -restart-every")
		}
		if soak.restartEvery < time.Second || soak.flushEvery < time.Second || soak.reportEvery < time.Second {
			return s, errors.New("-restart-every, -flush-every and -report-every must be at least 1s")
		}
		s.soak.warmup = s.warmup
		if !set["warmup"] {
			s.soak.warmup = 30 * time.Second
		}
	default:
		return s, fmt.Errorf("-mode %q: want main, flood, both, protocols, rls, scale or soak", *mode)
	}
	if s.rounds < 1 {
		return s, errors.New("-rounds must be at least 1")
	}
	if s.duration < time.Second {
		return s, errors.New("-duration must be at least 1s (wrk counts whole seconds)")
	}
	for _, f := range strings.Split(*conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return s, fmt.Errorf("-conns %q: want positive integers separated by commas", *conns)
		}
		s.conns = append(s.conns, n)
	}
	if !slices.Contains([]string{"auto", "wrk", "go"}, s.loader) {
		return s, fmt.Errorf("-loader %q: want auto, wrk or go", s.loader)
	}
	if *targets != "" {
		for _, name := range strings.Split(*targets, ",") {
			name = strings.TrimSpace(name)
			if !slices.Contains(targetOrder, name) {
				return s, fmt.Errorf("-targets: unknown target %q; known: %s", name, strings.Join(targetOrder, ", "))
			}
			s.only[name] = true
		}
	}
	root, err := moduleRoot(*repo)
	if err != nil {
		return s, err
	}
	s.repo = root
	if *baseline != "" {
		if s.baseline, err = moduleRoot(*baseline); err != nil {
			return s, fmt.Errorf("-baseline: %w", err)
		}
	}
	return s, nil
}

// moduleRoot is the folder holding the gateway's go.mod, found from dir
// upwards.
func moduleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		b, err := os.ReadFile(filepath.Join(d, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/edgegate/gateway\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of github.com/edgegate/gateway in %s or above; run from the repository or pass -repo", dir)
		}
	}
}

// commandLine is how the harness was invoked, for the report.
func commandLine(args []string) string {
	cmd := "go run ./bench"
	if exe, err := os.Executable(); err == nil && !strings.Contains(exe, "go-build") {
		cmd = os.Args[0]
	}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$") {
			a = strconv.Quote(a)
		}
		cmd += " " + a
	}
	return cmd
}

func run(args []string, stdout, stderr io.Writer) int {
	s, err := parseSettings(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "bench:", err)
		}
		return 2
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	go func() {
		select {
		case sig := <-signals:
			fmt.Fprintf(stderr, "\nbench: %s: stopping everything it started (again to abandon the clean-up)\n", sig)
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			cancel()
		case <-ctx.Done():
		}
	}()

	h, err := newHarness(s, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	defer h.close()

	started := time.Now()
	if err := h.setup(ctx); err != nil {
		return failed(ctx, stderr, err)
	}
	if drive, ok := map[string]func(context.Context, io.Writer) error{"protocols": h.runProtocols, "rls": h.runRLS, "scale": h.runScale}[s.modes[0]]; ok {
		if err := drive(ctx, stdout); err != nil {
			return failed(ctx, stderr, err)
		}
		fmt.Fprintf(stdout, "\nCommand: `%s` (%s in all; %s)\n", commandLine(s.args), time.Since(started).Round(time.Second),
			strings.Join(h.environment[1:], ", "))
		return 0
	}
	if s.modes[0] == "soak" {
		code, err := h.runSoak(ctx, stdout)
		if err != nil {
			return failed(ctx, stderr, err)
		}
		fmt.Fprintf(stdout, "Command: `%s` (%s in all; %s)\n", commandLine(s.args), time.Since(started).Round(time.Second),
			strings.Join(h.environment[1:], ", "))
		return code
	}
	var reports []string
	for _, mode := range s.modes {
		samples, err := h.runMode(ctx, mode)
		if err != nil {
			return failed(ctx, stderr, err)
		}
		reports = append(reports, h.report(mode, samples))
	}
	fmt.Fprintln(stdout)
	for _, r := range reports {
		fmt.Fprint(stdout, r)
	}
	fmt.Fprint(stdout, h.setupNotes())
	fmt.Fprintf(stdout, "\nCommand: `%s` (%s in all)\n", commandLine(s.args), time.Since(started).Round(time.Second))
	return 0
}

// failed reports err, or the interruption that caused it, and gives the
// exit code; the deferred clean-up runs after it.
func failed(ctx context.Context, stderr io.Writer, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted")
		return 130
	}
	fmt.Fprintln(stderr, "bench:", err)
	return 1
}
