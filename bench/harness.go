package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// harness owns everything one invocation starts: its temporary folder, its
// processes, and the clients it measures them with.
type harness struct {
	s        settings
	progress io.Writer
	dir      string
	procs    []*process // in start order; stopped in reverse
	pin      pinning
	loader   loader
	notes    []string // what was skipped or replaced, said in the report

	gatewayBin   string
	baselineBin  string // the -baseline checkout's gateway; "" without one
	baselineRev  string // its commit ("baseline" outside git), in its targets' names
	upstream     *process
	upstreamAddr string
	statsClient  *http.Client
	redisAddr    string // empty when redis-server is not installed
	redisPort    int
	redisBin     string
	redisData    string   // its folder, where a dump.rdb would be
	redisProc    *process // the running redis-server
	redisClient  *redis.Client
	nginxBin     string // empty when nginx is not installed
	perf         string // perf, counting each target's syscalls (-syscalls); empty: not counted
	environment  []string
	driven       map[string]bool // the targets some mode drove, for the report
	// pingMicros is the scale run's CPU per PING on a shard, by how
	// many go in one pipeline.
	pingMicros map[int]float64
	// rotations are the rotation targets started, each with its hot key's
	// target, in order, for the report's ratios.
	rotations [][2]string
	// baselines are each gateway target and its -baseline twin, for the
	// report's ratios.
	baselines [][2]string
}

func newHarness(s settings, progress io.Writer) (*harness, error) {
	dir, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		return nil, err
	}
	// nginx's worker runs as nobody and must reach its folder below.
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &harness{
		s:           s,
		progress:    progress,
		dir:         dir,
		pin:         newPinning(),
		statsClient: &http.Client{Timeout: 5 * time.Second},
		driven:      map[string]bool{},
		pingMicros:  map[int]float64{},
	}, nil
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.progress, format+"\n", args...)
}

func (h *harness) note(format string, args ...any) {
	n := strings.ReplaceAll(strings.TrimSpace(fmt.Sprintf(format, args...)), "\n", " ")
	h.notes = append(h.notes, n)
	h.logf("note: %s", n)
}

// close stops every process, newest first, and removes the folder.
func (h *harness) close() {
	h.stopFrom(0)
	if h.redisClient != nil {
		h.redisClient.Close()
	}
	if h.s.keep {
		h.logf("kept %s", h.dir)
		return
	}
	if err := os.RemoveAll(h.dir); err != nil {
		h.logf("remove %s: %v", h.dir, err)
	}
}

// buildGateway builds the gateway of the module at repo into bin.
func (h *harness) buildGateway(ctx context.Context, repo, bin string) error {
	args := []string{"build", "-o", bin}
	if h.s.profile != "" {
		// Serves /debug/pprof/ on the admin listener; nothing else changes.
		args = append(args, "-tags", "pprof")
	}
	args = append(args, ".")
	h.logf("building the gateway: go %s (in %s)", strings.Join(args, " "), repo)
	build := exec.CommandContext(ctx, "go", args...)
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	return nil
}

// stopFrom stops the processes started from index n on.
func (h *harness) stopFrom(n int) {
	for i := len(h.procs) - 1; i >= n; i-- {
		h.procs[i].stop()
	}
	h.procs = h.procs[:n]
}

// setup builds the gateway and starts what every mode shares: the
// upstream and redis-server.
func (h *harness) setup(ctx context.Context) error {
	if h.pin.taskset == "" {
		h.note("%s", h.pin.why)
	}
	var why string
	var err error
	if h.loader, why, err = newLoader(h.s.loader); err != nil {
		return err
	}
	if why != "" {
		h.note("%s", why)
	}
	h.loader.dir = h.dir
	h.environment = append(h.environment, "load: "+h.loader.name, runtime.Version())

	h.gatewayBin = filepath.Join(h.dir, "gateway")
	if err := h.buildGateway(ctx, h.s.repo, h.gatewayBin); err != nil {
		return err
	}
	h.environment = append(h.environment, "gateway "+revision(h.s.repo))
	if h.s.baseline != "" {
		h.baselineBin = filepath.Join(h.dir, "gateway-baseline")
		if err := h.buildGateway(ctx, h.s.baseline, h.baselineBin); err != nil {
			return fmt.Errorf("-baseline: %w", err)
		}
		if h.baselineRev, _ = commit(h.s.baseline); h.baselineRev == "" {
			h.baselineRev = "baseline"
		}
		h.environment = append(h.environment, "baseline gateway "+revision(h.s.baseline))
	}
	if err := os.WriteFile(filepath.Join(h.dir, pseudonymSecretFile), []byte(fakePseudonymSecret+"\n"), 0o600); err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	if h.upstreamAddr, err = freeAddr(); err != nil {
		return err
	}
	h.upstream, err = h.start("upstream", h.pin.argv(loadCPU, self, "internal-upstream", "-listen", h.upstreamAddr), filepath.Join(h.dir, "upstream.log"))
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, h.upstream, "http://"+h.upstreamAddr+upstreamStatsPath, isOK, 10*time.Second); err != nil {
		return err
	}

	if h.wants("gateway-redis") || h.wants("gateway-redis-inflight") || h.wants("gateway-redis-lease") {
		if err := h.startRedis(ctx); err != nil {
			return err
		}
	}
	if h.s.syscalls {
		if h.perf, err = findPerf(h.dir); err != nil {
			return fmt.Errorf("-syscalls: %w", err)
		}
	}
	if h.wants("nginx") {
		if path, err := exec.LookPath("nginx"); err != nil {
			h.note("nginx is not installed: no nginx rows")
		} else {
			h.nginxBin = path
			out, _ := exec.Command(path, "-v").CombinedOutput()
			h.environment = append(h.environment, strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: "))
		}
	}
	return nil
}

func (h *harness) wants(target string) bool {
	return len(h.s.only) == 0 || h.s.only[target]
}

func isOK(status int) bool { return status == http.StatusOK }

// startRedis starts a private redis-server on a free port, without
// persistence, on the load CPU: the gateway's CPU figures are the
// gateway's alone.
func (h *harness) startRedis(ctx context.Context) error {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		h.note("redis-server is not installed: no gateway-redis rows")
		return nil
	}
	if h.redisPort, err = freePort(); err != nil {
		return err
	}
	h.redisBin = path
	h.redisData = filepath.Join(h.dir, "redis")
	if err := os.Mkdir(h.redisData, 0o700); err != nil {
		return err
	}
	h.redisAddr = "127.0.0.1:" + strconv.Itoa(h.redisPort)
	h.redisClient = redis.NewClient(&redis.Options{Addr: h.redisAddr, MaxRetries: -1})
	if err := h.runRedis(ctx); err != nil {
		return err
	}
	version, _ := h.redisClient.Do(ctx, "INFO", "server").Text()
	for line := range strings.SplitSeq(version, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			h.environment = append(h.environment, "redis "+v)
		}
	}
	return nil
}

// runRedis starts redis-server on the harness's Redis port and waits until
// it answers. It loads dump.rdb from its folder when one is there (the
// soak's restarts that keep their data save one first); nothing saves by
// itself.
func (h *harness) runRedis(ctx context.Context) error {
	p, err := h.start("redis-server", h.pin.argv(loadCPU, h.redisBin,
		"--port", strconv.Itoa(h.redisPort), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", h.redisData, "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning"),
		filepath.Join(h.dir, "redis.log"))
	if err != nil {
		return err
	}
	h.redisProc = p
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := h.redisClient.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s does not answer: %w:%s", h.redisAddr, err, p.logTail())
		}
		select {
		case <-p.exited:
			return fmt.Errorf("redis-server exited: %v:%s", p.waitErr, p.logTail())
		default:
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// runMode starts the mode's targets, warms them, drives them in
// interleaved rounds and stops them again.
func (h *harness) runMode(ctx context.Context, mode string) ([]sample, error) {
	first := len(h.procs)
	defer h.stopFrom(first)
	targets, err := h.startTargets(ctx, mode)
	if err != nil {
		return nil, err
	}
	if len(targets) == 0 {
		return nil, errors.New("no target to drive")
	}
	maxConns := 0
	for _, c := range h.s.conns {
		maxConns = max(maxConns, c)
	}
	for _, t := range targets {
		if mode == "flood" {
			if err := pushOverLimit(ctx, t); err != nil {
				return nil, err
			}
		}
		h.logf("%s: warming %s for %s at %d connections", mode, t.name, h.s.warmup, maxConns)
		if _, err := h.loader.run(ctx, h.pin, t, maxConns, h.s.warmup); err != nil {
			return nil, err
		}
		if err := sleep(ctx, settleTime); err != nil {
			return nil, err
		}
		if t.accessLog != "" {
			if _, _, _, err := drainAccessLog(t.accessLog); err != nil {
				return nil, err
			}
		}
		h.driven[t.name] = true
	}
	perRun := h.s.duration + 700*time.Millisecond
	h.logf("%s: %d rounds × %d connection counts × %d targets × %s ≈ %s",
		mode, h.s.rounds, len(h.s.conns), len(targets), h.s.duration,
		(time.Duration(h.s.rounds*len(h.s.conns)*len(targets)) * perRun).Round(time.Second))
	var samples []sample
	for round := 1; round <= h.s.rounds; round++ {
		// Every other round the other way round: a machine that speeds up
		// or slows down through a round favours neither target of a pair
		// over the run (ratioTable pairs each round's figures).
		order := slices.Clone(targets)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, conns := range h.s.conns {
			for _, t := range order {
				if err := sleep(ctx, 300*time.Millisecond); err != nil {
					return nil, err
				}
				s, err := h.measure(ctx, t, conns, round, h.s.duration)
				if err != nil {
					return nil, err
				}
				h.logf("%s", progressLine(mode, h.s.rounds, s))
				samples = append(samples, s)
			}
		}
	}
	return samples, h.profileTargets(ctx, mode, targets)
}

// pushOverLimit sends requests until the target answers 429, so the flood
// starts with its one subject over the limit.
func pushOverLimit(ctx context.Context, t *target) error {
	client := &http.Client{Timeout: 5 * time.Second}
	for range 20 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			return nil
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %s while being pushed over its limit", t.name, resp.Status)
		}
	}
	return fmt.Errorf("%s never answered 429 in 20 requests: is the flood policy applied?", t.name)
}

func progressLine(mode string, rounds int, s sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s round %d/%d c=%-4d %-15s %6.0f req/s  p50 %s  p99 %s  cpu %5.1fµs/req  load-side %5.1fµs/req  core0 %3.0f%% core1 %3.0f%% other %3.0f%%",
		mode, s.round, rounds, s.conns, s.target, s.load.perSecond, formatMillis(s.load.p50), formatMillis(s.load.p99),
		s.microsPerRequest, s.loadMicrosPerRequest, 100*s.proxyCoreBusy, 100*s.loadCoreBusy, 100*s.otherCPU)
	if !math.IsNaN(s.redisCallsPerRequest) {
		fmt.Fprintf(&b, "  redis %.3f calls/req %sµs/call", s.redisCallsPerRequest, orDash("%.1f", s.redisMicrosPerCall))
	}
	fmt.Fprintf(&b, "  upstream %d reqs %d new conns", s.upstreamRequests, s.upstreamConns)
	if s.accessLogLines >= 0 {
		fmt.Fprintf(&b, "  log %d lines %.0f B/line", s.accessLogLines, float64(s.accessLogBytes)/float64(max(s.accessLogLines, 1)))
	}
	if s.load.non2xx > 0 {
		fmt.Fprintf(&b, "  non-2xx %d (429 in log %d)", s.load.non2xx, s.status429)
	}
	if s.load.errors > 0 {
		fmt.Fprintf(&b, "  socket errors %d", s.load.errors)
	}
	return b.String()
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return fmt.Sprintf("%s, %d CPUs", strings.TrimSpace(v), runtime.NumCPU())
		}
	}
	return fmt.Sprintf("%d CPUs", runtime.NumCPU())
}

// revision names the source the gateway was built from: the commit, and
// whether tracked files differed from it.
func revision(repo string) string {
	hash, dirty := commit(repo)
	if hash == "" {
		return "from a folder outside git"
	}
	if dirty {
		return "at " + hash + " with uncommitted changes"
	}
	return "at " + hash
}

// commit is the short hash of repo's HEAD, "" outside git, and whether
// tracked files differ from it.
func commit(repo string) (hash string, dirty bool) {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "", false
	}
	changed, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output()
	return strings.TrimSpace(string(out)), err == nil && len(changed) > 0
}
