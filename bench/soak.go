package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The soak (-mode soak) looks for leaks, not speed: one gateway binary with
// the Redis limiter, driven at about twice its policy's limit from a few
// subjects, while redis-server is killed and started again (every other
// time with its dataset, every other time empty) and SCRIPT FLUSH wipes
// its scripts. It reads the gateway's goroutines, open files and heap in
// use from the admin listener's /metrics and Redis's key count at a quiet
// point after the warm-up and again at the end, and passes when the end is
// within soakTolerance of the start and every answer was 200, 429 or 503.

// soakSettings are the soak's own flags.
type soakSettings struct {
	restartEvery time.Duration
	down         time.Duration // how long Redis stays dead at each restart
	flushEvery   time.Duration
	reportEvery  time.Duration
	warmup       time.Duration
	settle       time.Duration
	subjects     int
	rate         int // requests a second per subject
}

// The soak's policy: soakLimit requests per soakWindow per subject, a
// fixed window; each subject is driven at twice that. Keys live for the
// window plus the 5 s cleanup grace, records of de-duplication for 5 s: a
// settle of 20 s lets every key of the load expire.
const (
	soakLimit  = 50
	soakWindow = 10 * time.Second
)

// The pass mark: how far each figure at the end may be above the start.
var soakTolerance = struct {
	goroutines, openFiles int
	heapFactor            float64 // end heap ≤ start × factor, or start + heapFloor
	heapFloor             int64
	redisKeys             int64
}{goroutines: 10, openFiles: 5, heapFactor: 1.5, heapFloor: 8 << 20, redisKeys: 100}

// figures is one reading of the gateway and Redis.
type figures struct {
	goroutines int
	openFiles  int
	heapInuse  int64
	rss        int64
	redisKeys  int64
	restarts   int64 // gateway_redis_restarts_seen_total
	reloads    int64 // gateway_redis_noscript_reloads_total
}

func (f figures) String() string {
	return fmt.Sprintf("goroutines %d  open files %d  heap in use %.1f MiB  rss %.1f MiB  redis keys %d  restarts seen %d  script reloads %d",
		f.goroutines, f.openFiles, float64(f.heapInuse)/(1<<20), float64(f.rss)/(1<<20), f.redisKeys, f.restarts, f.reloads)
}

// soakLoad drives the gateway from s.subjects loopback addresses
// (127.0.0.2, 127.0.0.3, ...), each its own subject, each sending rate
// requests a second on one keep-alive connection, and counts statuses.
type soakLoad struct {
	url      string
	paused   atomic.Bool
	inflight atomic.Int64
	ok       atomic.Int64
	tooMany  atomic.Int64
	failed   atomic.Int64 // 503
	other    atomic.Int64 // any other status: a failure of the soak
	errors   atomic.Int64 // no response: a failure of the soak
	lastOK   atomic.Int64 // unix nanos of the last 200
	maxSlow  atomic.Int64 // slowest 503, nanoseconds
	mu       sync.Mutex
	samples  []string // the first few failures, to print
	wg       sync.WaitGroup
}

type statusCounts struct{ ok, tooMany, failed, other, errors int64 }

func (c statusCounts) String() string {
	return fmt.Sprintf("200 %d  429 %d  503 %d  other %d  errors %d", c.ok, c.tooMany, c.failed, c.other, c.errors)
}

func (c statusCounts) minus(d statusCounts) statusCounts {
	return statusCounts{c.ok - d.ok, c.tooMany - d.tooMany, c.failed - d.failed, c.other - d.other, c.errors - d.errors}
}

func (l *soakLoad) counts() statusCounts {
	return statusCounts{l.ok.Load(), l.tooMany.Load(), l.failed.Load(), l.other.Load(), l.errors.Load()}
}

func (l *soakLoad) start(ctx context.Context, subjects, rate int) {
	for i := range subjects {
		source := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}
		transport := &http.Transport{
			DialContext:         (&net.Dialer{LocalAddr: source, Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 2,
			DisableCompression:  true,
		}
		client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
		l.wg.Go(func() {
			defer transport.CloseIdleConnections()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if !l.paused.Load() {
					l.send(ctx, client)
				}
			}
		})
	}
}

func (l *soakLoad) send(ctx context.Context, client *http.Client) {
	l.inflight.Add(1)
	defer l.inflight.Add(-1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.url, nil)
	if err != nil {
		return
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			l.errors.Add(1)
			l.remember("no response: " + err.Error())
		}
		return
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	switch {
	case err != nil && ctx.Err() == nil:
		l.errors.Add(1)
		l.remember(fmt.Sprintf("%s, then the body broke: %v", resp.Status, err))
	case resp.StatusCode == http.StatusOK:
		l.ok.Add(1)
		l.lastOK.Store(time.Now().UnixNano())
	case resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "":
		l.tooMany.Add(1)
	case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		l.failed.Add(1)
		for {
			slowest := l.maxSlow.Load()
			if int64(took) <= slowest || l.maxSlow.CompareAndSwap(slowest, int64(took)) {
				break
			}
		}
	default:
		l.other.Add(1)
		l.remember(fmt.Sprintf("%s with Retry-After %q", resp.Status, resp.Header.Get("Retry-After")))
	}
}

func (l *soakLoad) remember(s string) {
	l.mu.Lock()
	if len(l.samples) < 5 {
		l.samples = append(l.samples, time.Now().Format("15:04:05.000 ")+s)
	}
	l.mu.Unlock()
}

// quiet pauses the load and waits for requests in flight to finish.
func (l *soakLoad) quiet(ctx context.Context) error {
	l.paused.Store(true)
	for l.inflight.Load() > 0 {
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func soakConfig(listen, admin, upstream, redisAddr string) string {
	return fmt.Sprintf(`# Written by go run ./bench -mode soak; removed when it ends.
listen {
  http             = %q
  admin            = %q
  shutdown_timeout = "1s"
}

limiter {
  backend = "redis"
  redis {
    mode       = "standalone"
    addrs      = [%q]
    key_prefix = "soak:"
  }
}

# The secret in this file is fake: it signs load-test pseudonyms only.
pseudonym {
  version = 1
  key "1" { secret = file(%q) }
}

log {
  level  = "info"
  access = false
}

policy "soak" {
  algorithm = "fixed-window"
  limit     = %d
  window    = %q
}

route "soak" {
  path     = "/"
  upstream = "http://%s"
  policy   = "soak"
  subject  = ["client_ip"]
}
`, listen, admin, redisAddr, pseudonymSecretFile, soakLimit, soakWindow.String(), upstream)
}

// soakGateway is the gateway under soak.
type soakGateway struct {
	proc    *process
	url     string
	metrics string
	client  *http.Client
}

func (h *harness) startSoakGateway(ctx context.Context) (*soakGateway, error) {
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(h.dir, "gateway-soak.hcl")
	if err := os.WriteFile(conf, []byte(soakConfig(listen, admin, h.upstreamAddr, h.redisAddr)), 0o644); err != nil {
		return nil, err
	}
	p, err := h.start("gateway", h.pin.argv(proxyCPU, h.gatewayBin, "run", "-config", conf), filepath.Join(h.dir, "gateway-soak.log"))
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, p, "http://"+admin+"/readyz", isOK, 20*time.Second); err != nil {
		return nil, err
	}
	return &soakGateway{proc: p, url: "http://" + listen + "/", metrics: "http://" + admin + "/metrics",
		client: &http.Client{Timeout: 5 * time.Second}}, nil
}

// read takes the figures: the gateway's from its /metrics, the key count
// from DBSIZE.
func (h *harness) readFigures(ctx context.Context, g *soakGateway) (figures, error) {
	var f figures
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.metrics, nil)
	if err != nil {
		return f, err
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return f, fmt.Errorf("gateway metrics: %w", err)
	}
	defer resp.Body.Close()
	values := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			values[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		return f, fmt.Errorf("gateway metrics: %w", err)
	}
	for _, name := range []string{"go_goroutines", "process_open_fds", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes"} {
		if _, ok := values[name]; !ok {
			return f, fmt.Errorf("gateway metrics: no %s", name)
		}
	}
	f.goroutines = int(values["go_goroutines"])
	f.openFiles = int(values["process_open_fds"])
	f.heapInuse = int64(values["go_memstats_heap_inuse_bytes"])
	f.rss = int64(values["process_resident_memory_bytes"])
	f.restarts = int64(values["gateway_redis_restarts_seen_total"])
	f.reloads = int64(values["gateway_redis_noscript_reloads_total"])
	if f.redisKeys, err = h.redisClient.DBSize(ctx).Result(); err != nil {
		return f, fmt.Errorf("redis DBSIZE: %w", err)
	}
	return f, nil
}

// restartRedis kills redis-server (SIGKILL) and starts it again on the
// same port; with keep it saves the dataset first, so that the new process
// loads it, and without it removes the dump so that Redis comes back empty.
func (h *harness) restartRedis(ctx context.Context, keep bool) error {
	dump := filepath.Join(h.redisData, "dump.rdb")
	if keep {
		if err := h.redisClient.Save(ctx).Err(); err != nil {
			return fmt.Errorf("redis SAVE before the restart: %w", err)
		}
	}
	h.redisProc.kill()
	for i, p := range h.procs {
		if p == h.redisProc {
			h.procs = append(h.procs[:i], h.procs[i+1:]...)
			break
		}
	}
	if err := sleep(ctx, h.s.soak.down); err != nil {
		return err
	}
	if !keep {
		if err := os.Remove(dump); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return h.runRedis(ctx)
}

// kill sends SIGKILL to the process group and waits for the leader.
func (p *process) kill() {
	syscall.Kill(-p.pid(), syscall.SIGKILL)
	<-p.exited
}

// runSoak is -mode soak; it returns the exit status.
func (h *harness) runSoak(ctx context.Context, stdout io.Writer) (int, error) {
	ss := h.s.soak
	if h.redisAddr == "" {
		return 1, errors.New("the soak needs redis-server")
	}
	g, err := h.startSoakGateway(ctx)
	if err != nil {
		return 1, err
	}
	out := func(format string, args ...any) {
		fmt.Fprintf(stdout, "%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
	}
	out("soak: %s of load after a %s warm-up; %d subjects × %d req/s against %d per %s each (about twice the limit); "+
		"Redis killed every %s and restarted %s later (with its data, then empty, in turn), SCRIPT FLUSH every %s; figures every %s",
		h.s.duration, ss.warmup, ss.subjects, ss.rate, soakLimit, soakWindow, ss.restartEvery, ss.down, ss.flushEvery, ss.reportEvery)
	first, err := h.readFigures(ctx, g)
	if err != nil {
		return 1, err
	}
	out("idle:   %s", first)

	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	load := &soakLoad{url: g.url}
	load.start(loadCtx, ss.subjects, ss.rate)

	// The warm-up fills the pools and the caches and goes through one
	// restart and one flush, so that the start figures include what a
	// restart leaves behind for good (a new connection pool, say).
	type restart struct {
		at   time.Time
		keep bool
	}
	var restarts []restart
	flushes := 0
	restartNow := func(keep bool) error {
		at := time.Now()
		if err := h.restartRedis(ctx, keep); err != nil {
			return err
		}
		restarts = append(restarts, restart{at, keep})
		what := "empty"
		if keep {
			what = "with its data"
		}
		out("redis killed and restarted %s (%s down)", what, time.Since(at).Round(time.Millisecond))
		return nil
	}
	flushNow := func() error {
		if err := h.redisClient.ScriptFlush(ctx).Err(); err != nil {
			return fmt.Errorf("SCRIPT FLUSH: %w", err)
		}
		flushes++
		return nil
	}
	if err := sleep(ctx, ss.warmup/2); err != nil {
		return 1, err
	}
	if err := restartNow(false); err != nil {
		return 1, err
	}
	if err := flushNow(); err != nil {
		return 1, err
	}
	if err := sleep(ctx, ss.warmup/2); err != nil {
		return 1, err
	}
	quietPoint := func(label string) (figures, error) {
		if err := load.quiet(ctx); err != nil {
			return figures{}, err
		}
		if err := sleep(ctx, ss.settle); err != nil {
			return figures{}, err
		}
		f, err := h.readFigures(ctx, g)
		if err != nil {
			return f, err
		}
		out("%s %s", label, f)
		return f, nil
	}
	start, err := quietPoint("start: ")
	if err != nil {
		return 1, err
	}
	load.paused.Store(false)

	began := time.Now()
	end := began.Add(h.s.duration)
	nextRestart, nextFlush, nextReport := began.Add(ss.restartEvery), began.Add(ss.flushEvery), began.Add(ss.reportEvery)
	keep := true
	lastCounts := load.counts()
	var problems []string
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for now := time.Now(); now.Before(end); now = time.Now() {
		switch {
		case !now.Before(nextRestart):
			if n := len(restarts); n > 0 && load.lastOK.Load() < restarts[n-1].at.UnixNano() {
				problems = append(problems, fmt.Sprintf("no request admitted between the restart at %s and the next", restarts[n-1].at.Format("15:04:05")))
			}
			if err := restartNow(keep); err != nil {
				return 1, err
			}
			keep = !keep
			nextRestart = nextRestart.Add(ss.restartEvery)
		case !now.Before(nextFlush):
			if err := flushNow(); err != nil {
				return 1, err
			}
			nextFlush = nextFlush.Add(ss.flushEvery)
		case !now.Before(nextReport):
			f, err := h.readFigures(ctx, g)
			if err != nil {
				return 1, err
			}
			c := load.counts()
			out("+%-6s %s | %s (last %s: %s)", now.Sub(began).Round(time.Second), f, c, ss.reportEvery, c.minus(lastCounts))
			lastCounts = c
			nextReport = nextReport.Add(ss.reportEvery)
		default:
			select {
			case <-ctx.Done():
				return 1, ctx.Err()
			case <-tick.C:
			}
		}
	}
	if n := len(restarts); n > 0 && load.lastOK.Load() < restarts[n-1].at.UnixNano() {
		problems = append(problems, fmt.Sprintf("no request admitted after the last restart, at %s", restarts[n-1].at.Format("15:04:05")))
	}
	final, err := quietPoint("end:   ")
	if err != nil {
		return 1, err
	}
	stopLoad()
	load.wg.Wait()

	c := load.counts()
	out("answers: %s; slowest 503 %s; %d Redis restarts, %d SCRIPT FLUSHes",
		c, time.Duration(load.maxSlow.Load()).Round(time.Millisecond), len(restarts), flushes)
	t := soakTolerance
	if c.other > 0 || c.errors > 0 {
		problems = append(problems, fmt.Sprintf("%d answers other than 200, 429 or 503 with Retry-After, %d requests without an answer; first: %s",
			c.other, c.errors, strings.Join(load.samples, "; ")))
	}
	if c.ok == 0 || c.tooMany == 0 {
		problems = append(problems, "the load never saw both 200 and 429: is the policy applied?")
	}
	if final.goroutines > start.goroutines+t.goroutines {
		problems = append(problems, fmt.Sprintf("goroutines %d → %d, more than %d up", start.goroutines, final.goroutines, t.goroutines))
	}
	if final.openFiles > start.openFiles+t.openFiles {
		problems = append(problems, fmt.Sprintf("open files %d → %d, more than %d up", start.openFiles, final.openFiles, t.openFiles))
	}
	if heapBound := max(int64(float64(start.heapInuse)*t.heapFactor), start.heapInuse+t.heapFloor); final.heapInuse > heapBound {
		problems = append(problems, fmt.Sprintf("heap in use %.1f → %.1f MiB, above %.1f MiB",
			float64(start.heapInuse)/(1<<20), float64(final.heapInuse)/(1<<20), float64(heapBound)/(1<<20)))
	}
	if final.redisKeys > start.redisKeys+t.redisKeys {
		problems = append(problems, fmt.Sprintf("redis keys %d → %d, more than %d up", start.redisKeys, final.redisKeys, t.redisKeys))
	}
	if len(problems) > 0 {
		out("FAIL:\n  %s", strings.Join(problems, "\n  "))
		return 1, nil
	}
	out("PASS: flat within %d goroutines, %d open files, heap ×%.1f or +%d MiB, %d Redis keys; only 200, 429 and 503 with Retry-After",
		t.goroutines, t.openFiles, t.heapFactor, t.heapFloor>>20, t.redisKeys)
	return 0, nil
}
