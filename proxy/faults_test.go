package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
)

// The fault matrix: each way Redis can fail, over HTTP, against a real
// redis-server, with the circuit breaker at its defaults (5 failures, 2s).
// While a fault lasts and after it ends, clients see only 200, 429 or 503;
// every 429 and 503 says Retry-After; a 503 comes within the limiter's
// deadline plus faultSlack, and at once (median) while the breaker is open;
// only a 200 reaches the upstream; a 200 comes back without a restart; and
// no goroutine is left behind.
const (
	faultDeadline     = 200 * time.Millisecond
	faultSlack        = 50 * time.Millisecond
	faultOpenMedian   = 20 * time.Millisecond
	faultWorkers      = 4
	faultGoroutineGap = 3 // goroutines a settled gateway may differ by
	faultPrincipal    = "X-Auth-Principal"
)

// faultCase is one fault: how to cause it and how to end it.
type faultCase struct {
	name      string
	redisArgs []string
	// link puts a redistest.Link between the gateway and Redis; blackholed
	// makes it a black hole from the gateway's start-up on.
	link, blackholed bool
	// decidesNothing: while the fault lasts no decision can be made, so
	// every request is a 503 and the breaker opens.
	decidesNothing bool
	// lasts is how long requests are driven through the fault; 600ms
	// unless set.
	lasts time.Duration
	// enough, when set, keeps driving past lasts (up to 20s) until it
	// holds: a fault struck per so many requests needs that many sent,
	// which a busy machine takes longer to send.
	enough     func(f *faultScene) bool
	begin, end func(f *faultScene)
	// check is what else the fault must show, once it is over.
	check func(t *testing.T, f *faultScene)
}

// faultScene is what a fault acts on.
type faultScene struct {
	t      *testing.T
	server *redistest.Server
	link   *redistest.Link
	admin  *redis.Client
	rig    *faultRig
	// Background fault makers run until stop is closed.
	stop     chan struct{}
	bg       sync.WaitGroup
	injected atomic.Int64 // flushes, kills: how often the fault struck
}

// background runs fn until the fault ends.
func (f *faultScene) background(fn func(stop <-chan struct{})) {
	f.stop = make(chan struct{})
	f.bg.Go(func() { fn(f.stop) })
}

func (f *faultScene) stopBackground() {
	close(f.stop)
	f.bg.Wait()
}

func TestFaultMatrixOverHTTP(t *testing.T) {
	cases := []faultCase{
		{
			name: "replies later than the deadline are a 503 in time, and decisions return when Redis is fast again",
			link: true, decidesNothing: true,
			begin: func(f *faultScene) { f.link.Delay(2 * faultDeadline) },
			end:   func(f *faultScene) { f.link.Heal() },
		},
		{
			name:      "a server blocked by DEBUG SLEEP is a 503 in time, and decides again once it wakes",
			redisArgs: []string{"--enable-debug-command", "yes"}, decidesNothing: true,
			begin: func(f *faultScene) {
				f.background(func(<-chan struct{}) {
					if err := f.admin.Do(context.Background(), "DEBUG", "SLEEP", "1.2").Err(); err != nil {
						f.t.Errorf("DEBUG SLEEP: %v", err)
					}
				})
				f.waitFor(func() bool { return !f.answersWithin(20 * time.Millisecond) })
			},
			end: func(f *faultScene) { f.bg.Wait() },
		},
		{
			name: "a black hole from start-up on is a 503 in time, and decisions begin when it heals",
			link: true, blackholed: true, decidesNothing: true,
			begin: func(*faultScene) {},
			end:   func(f *faultScene) { f.link.Heal() },
		},
		{
			name: "a connection reset in the middle of a reply is a 503, and decisions return when resets stop",
			link: true, decidesNothing: true,
			begin: func(f *faultScene) { f.link.ResetMidReply() },
			end:   func(f *faultScene) { f.link.Heal() },
			check: func(t *testing.T, f *faultScene) {
				if f.link.Resets() == 0 {
					t.Error("the link reset no connection")
				}
			},
		},
		{
			name: "a link squeezed to 100 bytes a second is a 503 in time, and decisions return when it widens",
			link: true, decidesNothing: true,
			begin: func(f *faultScene) { f.link.Squeeze(100) },
			end:   func(f *faultScene) { f.link.Heal() },
		},
		{
			name:           "a redis-server frozen by SIGSTOP is a 503 in time, and decides again after SIGCONT",
			decidesNothing: true,
			begin:          func(f *faultScene) { f.server.Stop() },
			end:            func(f *faultScene) { f.server.Cont() },
		},
		{
			name:           "a killed redis-server is a fast 503, and decisions return when it is restarted",
			decidesNothing: true,
			begin:          func(f *faultScene) { f.server.Kill() },
			end:            func(f *faultScene) { f.server.Restart() },
		},
		{
			name:   "SCRIPT FLUSH every 200 requests under load costs no request",
			lasts:  1500 * time.Millisecond,
			enough: func(f *faultScene) bool { return f.injected.Load() >= 3 },
			begin: func(f *faultScene) {
				f.background(func(stop <-chan struct{}) {
					next := f.rig.sent() + 200
					for {
						select {
						case <-stop:
							return
						case <-time.After(2 * time.Millisecond):
						}
						if f.rig.sent() < next {
							continue
						}
						next += 200
						if err := f.admin.ScriptFlush(context.Background()).Err(); err != nil {
							f.t.Errorf("SCRIPT FLUSH: %v", err)
							return
						}
						f.injected.Add(1)
					}
				})
			},
			end: func(f *faultScene) { f.stopBackground() },
			check: func(t *testing.T, f *faultScene) {
				if f.injected.Load() < 3 {
					t.Errorf("%d SCRIPT FLUSHes under load, want at least 3", f.injected.Load())
				}
				f.rig.allDecided("through the flushes", f.rig.phaseSamples("during"))
				if n := f.rig.metric("gateway_redis_noscript_reloads_total", ""); n < 1 {
					t.Errorf("gateway_redis_noscript_reloads_total %v, want the reloads counted", n)
				}
			},
		},
		{
			name:      "a Redis full under noeviction is a fast 503 (OOM), and decisions return once keys are deleted",
			redisArgs: []string{"--maxmemory", "2mb", "--maxmemory-policy", "noeviction"}, decidesNothing: true,
			begin: func(f *faultScene) {
				// Ever smaller values, down to the last bytes: a failed
				// SET frees its own argument, which would leave room for a
				// few decisions more.
				ctx := context.Background()
				for _, size := range []int{64 << 10, 4 << 10, 256, 16} {
					junk := strings.Repeat("x", size)
					for {
						i := f.injected.Load()
						err := f.admin.Set(ctx, fmt.Sprint("junk:", i), junk, 0).Err()
						if redis.IsOOMError(err) {
							break
						}
						if err != nil || i > 100000 {
							f.t.Fatalf("filling Redis: %d keys, then %v", i, err)
						}
						f.injected.Add(1)
					}
				}
				// Full to the byte, a command's own buffers freed after
				// it (a batch of decisions is a few KB of arguments) can
				// leave room for the next: the limit goes 256 KB under
				// what is used, and back in end.
				bytes := f.server.UsedMemory(f.t)
				if bytes < 1<<20 {
					f.t.Fatalf("used_memory %d after filling Redis, want about 2 MB", bytes)
				}
				if err := f.admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(bytes-256<<10, 10)).Err(); err != nil {
					f.t.Fatalf("lowering maxmemory: %v", err)
				}
			},
			end: func(f *faultScene) {
				if err := f.admin.ConfigSet(context.Background(), "maxmemory", "2mb").Err(); err != nil {
					f.t.Fatalf("restoring maxmemory: %v", err)
				}
				keys := make([]string, f.injected.Load())
				for i := range keys {
					keys[i] = fmt.Sprint("junk:", i)
				}
				if err := f.admin.Del(context.Background(), keys...).Err(); err != nil {
					f.t.Fatalf("deleting the junk: %v", err)
				}
			},
			check: func(t *testing.T, f *faultScene) {
				if n := f.rig.metric("gateway_redis_errors_total", "oom"); n < 1 {
					t.Errorf("gateway_redis_errors_total{cause=oom} %v, want the OOM replies counted", n)
				}
			},
		},
		{
			name:      "another client's endless function (BUSY) is a fast 503, and decisions return after FUNCTION KILL",
			redisArgs: []string{"--busy-reply-threshold", "50"}, decidesNothing: true,
			begin: func(f *faultScene) {
				// A Redis 7 function, so that nothing in this repository sends
				// EVAL, not even to play another client.
				const spin = "#!lua name=faults\nredis.register_function('spin', function() while true do end end)"
				if err := f.admin.FunctionLoadReplace(context.Background(), spin).Err(); err != nil {
					f.t.Fatalf("FUNCTION LOAD: %v", err)
				}
				scripter := redis.NewClient(&redis.Options{Addr: f.server.Addr, ReadTimeout: 30 * time.Second, MaxRetries: -1})
				f.background(func(<-chan struct{}) {
					defer scripter.Close()
					err := scripter.FCall(context.Background(), "spin", nil).Err()
					if err == nil || !strings.Contains(err.Error(), "killed") {
						f.t.Errorf("the endless script ended with %v, want killed", err)
					}
				})
				f.waitFor(func() bool { return redis.HasErrorPrefix(f.admin.Ping(context.Background()).Err(), "BUSY") })
			},
			end: func(f *faultScene) {
				f.waitFor(func() bool { return f.admin.FunctionKill(context.Background()).Err() == nil })
				f.bg.Wait()
			},
			check: func(t *testing.T, f *faultScene) {
				if n := f.rig.metric("gateway_redis_errors_total", "busy"); n < 1 {
					t.Errorf("gateway_redis_errors_total{cause=busy} %v, want the BUSY replies counted", n)
				}
			},
		},
		{
			name: "CLIENT KILL of the gateway's connections every 25ms costs at most a few 503s",
			begin: func(f *faultScene) {
				f.background(func(stop <-chan struct{}) {
					for {
						select {
						case <-stop:
							return
						case <-time.After(25 * time.Millisecond):
						}
						n, err := f.server.KillClients(context.Background())
						if err != nil {
							f.t.Errorf("CLIENT KILL: %v", err)
							return
						}
						f.injected.Add(n)
					}
				})
			},
			end: func(f *faultScene) { f.stopBackground() },
			check: func(t *testing.T, f *faultScene) {
				if f.injected.Load() == 0 {
					t.Error("CLIENT KILL closed no connection")
				}
				during := f.rig.phase("during")
				if ok := during[http.StatusOK]; ok*2 < len(f.rig.phaseSamples("during")) {
					t.Errorf("during the kills %v: want most requests decided", during)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runFault(t, c) })
	}
	t.Run("a restart with an empty dataset gives a subject a fresh budget, and a remembered denial stays", faultEmptyRestart)
	t.Run("a sentinel failover is a 503 in time, and decisions resume on the new master", faultSentinelFailover)
	t.Run("a Cluster slot range holding the hot subject moves to another master under load, and no count is lost", faultClusterSlotMigration)
	t.Run("a Cluster replica promoted by CLUSTER FAILOVER, then after its master is killed: 503s in time, and decisions resume on the new master", faultClusterPromotion)
}

func runFault(t *testing.T, c faultCase) {
	faultNoLeakedGoroutines(t)
	f := &faultScene{t: t}
	f.server = redistest.Start(t, c.redisArgs...)
	f.admin = f.server.Client(t)
	addr := f.server.Addr
	if c.link {
		f.link = redistest.StartLink(t, f.server.Addr, c.blackholed)
		addr = f.link.Addr
	}
	f.rig = newFaultRig(t, limiter.RedisOptions{Addrs: []string{addr}},
		redisPolicy(limitertest.FixedWindow(1<<30, time.Hour), "matrix"))
	alive := -1
	if !c.blackholed {
		f.rig.drive("before", 200*time.Millisecond)
		// A gateway that started into a black hole has no healthy state
		// to come back to: its count at cleanup is the check.
		alive = f.rig.settledGoroutines()
	}

	c.begin(f)
	if c.lasts == 0 {
		c.lasts = 600 * time.Millisecond
	}
	during := f.rig.drive("during", c.lasts)
	for until := time.Now().Add(20 * time.Second); c.enough != nil && !c.enough(f) && time.Now().Before(until); {
		during = f.rig.drive("during", 250*time.Millisecond)
	}
	if c.decidesNothing {
		for _, s := range during {
			if s.status != http.StatusServiceUnavailable {
				t.Errorf("during the fault: status %d, want 503 (nothing can be decided)", s.status)
				break
			}
		}
		f.rig.breakerIsOpen()
	}
	c.end(f)
	took := f.rig.recovers(f.rig.principal("recovery"), 6*time.Second)
	f.rig.allDecided("after recovery", f.rig.drive("after", 300*time.Millisecond))
	f.rig.holdsInvariants()
	if c.check != nil {
		c.check(t, f)
	}
	f.rig.goroutinesBackTo(alive)
	f.rig.report(took)
	if n := f.injected.Load(); n > 0 {
		t.Logf("  the fault struck %d times (flushes, kills, junk keys); NOSCRIPT reloads counted %v",
			n, f.rig.metric("gateway_redis_noscript_reloads_total", ""))
	}
}

// faultEmptyRestart: the budgets live only in Redis, so a Redis restarted
// without its data has forgotten what every subject spent. A subject that
// had spent part of its budget gets a fresh one; a subject this instance
// saw denied is still answered 429 from its memory of the denial until the
// window ends (docs/redis.md, "Bounds under restarts"). This is documented
// behaviour, not a fault of the gateway.
func faultEmptyRestart(t *testing.T) {
	faultNoLeakedGoroutines(t)
	s := redistest.Start(t)
	// A day's window: no window ends while the test runs.
	rig := newFaultRig(t, limiter.RedisOptions{Addrs: []string{s.Addr}},
		redisPolicy(limitertest.FixedWindow(5, 24*time.Hour), "five"))
	spender, denied := rig.principal("spender"), rig.principal("denied")
	for range 3 {
		rig.get("before", spender)
	}
	for range 6 {
		rig.get("before", denied)
	}
	if got := rig.phase("before"); got[200] != 8 || got[429] != 1 {
		t.Fatalf("before the restart %v, want 8 admitted and 1 denied", got)
	}
	alive := rig.settledGoroutines()

	s.Kill()
	for range 8 {
		if got := rig.get("during", spender); got.status != 503 {
			t.Errorf("spender while Redis is down: %d, want 503", got.status)
		}
		if got := rig.get("during", denied); got.status != 429 {
			t.Errorf("denied subject while Redis is down: %d, want 429 from the remembered denial", got.status)
		}
	}
	rig.breakerIsOpen()
	s.Restart()
	took := rig.recovers(spender, 6*time.Second)
	recovery := rig.phaseSamples("recovery")
	if last := recovery[len(recovery)-1]; !strings.HasPrefix(last.rateLimit, `"five";r=4;`) {
		t.Errorf("spender's first decision after the restart: RateLimit %q, want r=4: a fresh budget, the 3 spent are forgotten", last.rateLimit)
	}
	if got := rig.get("after", denied); got.status != 429 {
		t.Errorf("denied subject after the restart: %d, want 429 until its window ends", got.status)
	}
	if got := rig.get("after", rig.principal("newcomer")); got.status != 200 || !strings.HasPrefix(got.rateLimit, `"five";r=4;`) {
		t.Errorf("a new subject after the restart: %d %q, want 200 with r=4", got.status, got.rateLimit)
	}
	rig.holdsInvariants()
	rig.goroutinesBackTo(alive)
	rig.report(took)
}

func faultSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover takes seconds")
	}
	faultNoLeakedGoroutines(t)
	g := redistest.StartSentinel(t)
	rig := newFaultRig(t, limiter.RedisOptions{Mode: limiter.RedisSentinel, Addrs: g.SentinelAddrs(), MasterName: g.MasterName},
		redisPolicy(limitertest.FixedWindow(1<<30, time.Hour), "matrix"))
	rig.drive("before", 200*time.Millisecond)
	alive := rig.settledGoroutines()
	g.Master.Kill()
	killed := time.Now()
	rig.drive("during", 600*time.Millisecond)
	rig.breakerIsOpen()
	// The fault ends when a sentinel promotes the replica, some two
	// seconds after the master died (down-after 1s, then the election).
	replica := fmt.Sprint(g.Replica.Port)
	for deadline := time.Now().Add(20 * time.Second); !sentinelsName(g, replica); time.Sleep(50 * time.Millisecond) {
		rig.get("during", rig.principal("during"))
		if time.Now().After(deadline) {
			rig.holdsInvariants()
			t.Skip("no sentinel promoted the replica within 20s on this machine: the failover, not the gateway, did not happen")
		}
	}
	t.Logf("a sentinel named the replica master %v after the kill", time.Since(killed).Round(time.Millisecond))
	took := rig.recovers(rig.principal("recovery"), 6*time.Second)
	rig.allDecided("after the failover", rig.drive("after", 300*time.Millisecond))
	rig.holdsInvariants()
	rig.goroutinesBackTo(alive)
	rig.report(took)
}

// sentinelsName reports whether a sentinel of g names the server on port
// as the master.
func sentinelsName(g *redistest.Sentinel, port string) bool {
	for _, addr := range g.SentinelAddrs() {
		c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		master, err := c.GetMasterAddrByName(context.Background(), g.MasterName).Result()
		c.Close()
		if err == nil && len(master) == 2 && master[1] == port {
			return true
		}
	}
	return false
}

// faultRig is one gateway with a Redis limiter and a 200ms deadline, the
// upstream behind it, and a record of every request a client sent.
type faultRig struct {
	t         *testing.T
	up        *upstream
	url       string
	client    *http.Client
	transport *http.Transport
	logs      *syncBuffer
	metrics   *prometheus.Registry
	runID     string

	stalls  *stallMonitor
	excused int // late 503s the process's own stalls account for

	slowStacks []string // when the first few requests were unanswered past the bound

	mu      sync.Mutex
	samples []faultSample
}

type faultSample struct {
	phase      string
	principal  string
	start      time.Time
	status     int // 0: no response
	err        error
	retryAfter string
	rateLimit  string
	took       time.Duration
}

func newFaultRig(t *testing.T, opts limiter.RedisOptions, p *limiter.Policy) *faultRig {
	t.Helper()
	r := &faultRig{t: t, up: newUpstream(t), logs: &syncBuffer{}, metrics: prometheus.NewRegistry(), runID: limitertest.Subject()[3:15],
		stalls: startStallMonitor(t)}
	opts.Registerer = r.metrics
	lim := redistest.NewLimiter(t, opts)
	h, err := proxy.NewHandler(proxy.Options{Logger: slog.New(slog.NewJSONHandler(r.logs, nil)), AccessLog: true}, proxy.Config{
		Routes:   []proxy.Route{route("orders.read", "/", r.up, t, p)},
		Resolver: newResolver(t, []string{"127.0.0.1/32"}),
		Limiter:  lim,
		Deadline: faultDeadline,
	})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(h)
	t.Cleanup(gw.Close)
	r.url = gw.URL
	r.transport = &http.Transport{MaxIdleConnsPerHost: 2 * faultWorkers}
	r.client = &http.Client{Transport: r.transport, Timeout: 5 * time.Second}
	t.Cleanup(r.transport.CloseIdleConnections)
	return r
}

func (r *faultRig) principal(name string) string { return name + "-" + r.runID }

// get sends one request as principal and records what came back.
func (r *faultRig) get(phase, principal string) faultSample {
	req, err := http.NewRequest("GET", r.url+"/", nil)
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set(faultPrincipal, principal)
	start := time.Now()
	// A request still unanswered past the bound leaves the stacks of the
	// requests the gateway is serving, to say where it waits.
	watch := time.AfterFunc(faultDeadline+faultSlack+10*time.Millisecond, r.noteSlowRequest)
	res, err := r.client.Do(req)
	watch.Stop()
	s := faultSample{phase: phase, principal: principal, start: start, took: time.Since(start), err: err}
	if err == nil {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		s.status, s.retryAfter, s.rateLimit = res.StatusCode, res.Header.Get("Retry-After"), res.Header.Get("RateLimit")
	}
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
	return s
}

// drive sends requests from faultWorkers clients, each its own subject,
// for d, and returns what they got.
func (r *faultRig) drive(phase string, d time.Duration) []faultSample {
	var wg sync.WaitGroup
	until := time.Now().Add(d)
	for i := range faultWorkers {
		wg.Go(func() {
			who := r.principal(fmt.Sprint("worker-", i))
			for time.Now().Before(until) {
				r.get(phase, who)
			}
		})
	}
	wg.Wait()
	return r.phaseSamples(phase)
}

func (r *faultRig) sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.samples)
}

func (r *faultRig) phaseSamples(phase string) []faultSample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []faultSample
	for _, s := range r.samples {
		if s.phase == phase {
			out = append(out, s)
		}
	}
	return out
}

// phase counts a phase's statuses.
func (r *faultRig) phase(phase string) map[int]int {
	counts := map[int]int{}
	for _, s := range r.phaseSamples(phase) {
		counts[s.status]++
	}
	return counts
}

// breakerIsOpen asserts that, the fault having lasted a while, a 503 comes
// at once: the median of a run of requests, so that a probe or a busy
// machine does not decide it, each less the time the machine kept the
// process off the CPU meanwhile (the stall monitor's measure, as for the
// late 503s), so that a descheduled test is not blamed on the gateway.
func (r *faultRig) breakerIsOpen() {
	r.t.Helper()
	var took, own []time.Duration
	for range 11 {
		s := r.get("breaker open", r.principal("probe"))
		if s.status != http.StatusServiceUnavailable {
			r.t.Errorf("with the breaker open: status %d, want 503", s.status)
		}
		took = append(took, s.took)
		own = append(own, max(s.took-r.stalls.within(s.start, s.start.Add(s.took)), 0))
	}
	if m := median(own); m > faultOpenMedian {
		r.t.Errorf("with the breaker open the median 503 took %v off stalls, want at most %v: %v (with stalls %v)", m, faultOpenMedian, own, took)
	}
}

// recovers polls as principal until a request is admitted and returns how
// long that took since the fault ended.
func (r *faultRig) recovers(principal string, within time.Duration) time.Duration {
	r.t.Helper()
	start := time.Now()
	for {
		if r.get("recovery", principal).status == http.StatusOK {
			return time.Since(start)
		}
		if time.Since(start) > within {
			r.t.Fatalf("no 200 within %v after the fault ended: %v", within, r.phase("recovery"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *faultRig) noteSlowRequest() {
	r.mu.Lock()
	enough := len(r.slowStacks) >= 3
	r.mu.Unlock()
	if enough {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "at %s:\n", time.Now().Format("15:04:05.000"))
	for g := range strings.SplitSeq(allStacks(), "\n\n") {
		if strings.Contains(g, "proxy.(*Handler).ServeHTTP") {
			b.WriteString(g + "\n\n")
		}
	}
	r.mu.Lock()
	r.slowStacks = append(r.slowStacks, b.String())
	r.mu.Unlock()
}

// explainLate logs what the gateway said of its slow 503s and where its
// requests waited when one was first late.
func (r *faultRig) explainLate() {
	var b strings.Builder
	for line := range strings.Lines(r.logs.String()) {
		var entry struct {
			Msg, Outcome string
			Status       int
			Duration     time.Duration
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "request" &&
			entry.Status == http.StatusServiceUnavailable && entry.Duration > faultDeadline+faultSlack/2 {
			fmt.Fprintf(&b, "  access log: 503 %s after %v\n", entry.Outcome, entry.Duration)
		}
	}
	r.mu.Lock()
	stacks := strings.Join(r.slowStacks, "")
	r.mu.Unlock()
	r.t.Logf("slow 503s:\n%s  requests in the gateway when the first were late:\n%s", b.String(), stacks)
}

// allDecided checks that every request was admitted while Redis was
// healthy. A 503 during which this process, or a thread of it, was kept
// off the CPU for a quarter of the deadline or more is the busy machine's,
// and only logged.
func (r *faultRig) allDecided(when string, samples []faultSample) {
	r.t.Helper()
	for _, s := range samples {
		if s.status == http.StatusOK {
			continue
		}
		stalled := r.stalls.within(s.start, s.start.Add(s.took))
		if s.status == http.StatusServiceUnavailable && stalled >= faultDeadline/4 {
			r.excused++
			r.t.Logf("%s: a 503 after %v, while the machine kept the process off the CPU for %v", when, s.took, stalled)
			continue
		}
		r.t.Errorf("%s: status %d after %v, want 200 only", when, s.status, s.took)
		return
	}
}

// holdsInvariants checks every request sent so far.
func (r *faultRig) holdsInvariants() {
	r.t.Helper()
	r.mu.Lock()
	samples := slices.Clone(r.samples)
	r.mu.Unlock()
	admitted, bad := 0, 0
	for _, s := range samples {
		var problem string
		switch {
		case s.err != nil:
			problem = fmt.Sprintf("no response: %v", s.err)
		case s.status == http.StatusOK:
			admitted++
		case s.status != http.StatusTooManyRequests && s.status != http.StatusServiceUnavailable:
			problem = fmt.Sprintf("status %d, want 200, 429 or 503", s.status)
		case !positiveSeconds(s.retryAfter):
			problem = fmt.Sprintf("status %d with Retry-After %q", s.status, s.retryAfter)
		case s.status == http.StatusServiceUnavailable && s.took > faultDeadline+faultSlack:
			stalled := r.stalls.within(s.start, s.start.Add(s.took))
			if s.took-stalled > faultDeadline+faultSlack {
				problem = fmt.Sprintf("503 after %v (off the CPU for %v of it), want within %v", s.took, stalled, faultDeadline+faultSlack)
			} else {
				r.excused++
				r.t.Logf("%s: a 503 after %v, of which the machine kept the process off the CPU for %v", s.phase, s.took, stalled)
			}
		}
		if problem != "" {
			if bad++; bad <= 5 {
				r.t.Errorf("%s: %s", s.phase, problem)
			}
		}
	}
	if bad > 5 {
		r.t.Errorf("%d requests broke an invariant", bad)
	}
	if bad > 0 {
		r.explainLate()
	}
	if n := r.up.count(); n != admitted {
		r.t.Errorf("the upstream saw %d requests, and %d were admitted", n, admitted)
	}
}

func positiveSeconds(v string) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n > 0
}

// settledGoroutines closes idle client connections and returns the number
// of the gateway's own goroutines (limiter, proxy, go-redis) once it stops
// falling. Pooled connections come and go with the load, so they are left
// out; a request stuck in the gateway is not.
func (r *faultRig) settledGoroutines() int {
	r.transport.CloseIdleConnections()
	n := gatewayGoroutines()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		m := gatewayGoroutines()
		if m >= n {
			return m
		}
		n = m
	}
	return n
}

// goroutinesBackTo checks that the gateway, still running, holds no more
// goroutines of its own than before the fault; before < 0 skips the check.
func (r *faultRig) goroutinesBackTo(before int) {
	r.t.Helper()
	if before < 0 {
		return
	}
	r.transport.CloseIdleConnections()
	n := 0
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if n = gatewayGoroutines(); n <= before+faultGoroutineGap {
			return
		}
	}
	r.t.Errorf("%d gateway goroutines after the fault, %d before:\n%s", n, before, goroutineDump())
}

func allStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// gatewayGoroutines counts the goroutines running code of the gateway's
// packages or of go-redis.
func gatewayGoroutines() int {
	count := 0
	for g := range strings.SplitSeq(allStacks(), "\n\n") {
		if strings.Contains(g, "github.com/edgegate/gateway/limiter.") ||
			strings.Contains(g, "github.com/edgegate/gateway/proxy.") ||
			strings.Contains(g, "github.com/redis/go-redis/") {
			count++
		}
	}
	return count
}

// faultNoLeakedGoroutines checks, once everything the test started has
// stopped (it must be the test's first cleanup, so that it runs last),
// that the goroutines are back to their number at the test's start.
func faultNoLeakedGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		n := 0
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if n = runtime.NumGoroutine(); n <= before+faultGoroutineGap {
				return
			}
		}
		t.Errorf("%d goroutines after cleanup, %d at the start:\n%s", n, before, goroutineDump())
	})
}

func goroutineDump() string {
	var b bytes.Buffer
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// metric sums a counter's series whose cause label is cause ("" for any).
func (r *faultRig) metric(name, cause string) float64 {
	families, err := r.metrics.Gather()
	if err != nil {
		r.t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := cause == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "cause" && l.GetValue() == cause {
					match = true
				}
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// report logs what the fault looked like from outside: statuses by phase,
// how fast the 503s came, the outcomes of the access log, Redis errors by
// cause, and how long recovery took.
func (r *faultRig) report(recovery time.Duration) {
	var b strings.Builder
	for _, phase := range []string{"before", "during", "breaker open", "recovery", "after"} {
		samples := r.phaseSamples(phase)
		if len(samples) == 0 {
			continue
		}
		var slow []time.Duration
		for _, s := range samples {
			if s.status == http.StatusServiceUnavailable {
				slow = append(slow, s.took)
			}
		}
		fmt.Fprintf(&b, "\n  %-12s %v", phase, r.phase(phase))
		if len(slow) > 0 {
			fmt.Fprintf(&b, " 503 median %v max %v", median(slow).Round(100*time.Microsecond), slices.Max(slow).Round(100*time.Microsecond))
		}
	}
	outcomes := map[string]int{}
	for line := range strings.Lines(r.logs.String()) {
		var entry struct {
			Msg, Outcome string
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "request" {
			outcomes[entry.Outcome]++
		}
	}
	causes := map[string]float64{}
	families, _ := r.metrics.Gather()
	for _, f := range families {
		if f.GetName() == "gateway_redis_errors_total" {
			for _, m := range f.GetMetric() {
				causes[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	fmt.Fprintf(&b, "\n  outcomes %v\n  redis errors %v\n  recovered %v after the fault ended; upstream saw %d; 503s excused by stalls of the process: %d",
		outcomes, causes, recovery.Round(time.Millisecond), r.up.count(), r.excused)
	r.t.Log(b.String())
}

// stallMonitor notes when this process was held up by the machine rather
// than by the gateway, two ways: a goroutine that asks to wake every 2ms
// records how late it woke (the whole process off the CPU), and every 10ms
// it reads how long each of the process's threads has waited on a run
// queue (/proc/self/task/*/schedstat), which catches one thread taken off
// the CPU while its goroutine held something the others wait for. A 503
// late by no more than that was late because the shared 2-core machine was
// busy; the gateway's own waits, on a lock or a socket, stall neither.
type stallMonitor struct {
	mu     sync.Mutex
	stalls []stall
	waits  []threadWaits
}

type stall struct {
	from, to time.Time
	lag      time.Duration
}

// threadWaits is each thread's run-queue wait so far, at one moment.
type threadWaits struct {
	at   time.Time
	wait map[string]time.Duration
}

const stallTick = 2 * time.Millisecond

func startStallMonitor(t *testing.T) *stallMonitor {
	m := &stallMonitor{}
	stop, done := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		<-done
	})
	go func() {
		defer close(done)
		tick := time.NewTimer(stallTick)
		defer tick.Stop()
		for i := 0; ; i++ {
			if i%5 == 0 {
				w := threadWaits{at: time.Now(), wait: runQueueWaits()}
				m.mu.Lock()
				m.waits = append(m.waits, w)
				m.mu.Unlock()
			}
			from := time.Now()
			tick.Reset(stallTick)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			to := time.Now()
			if lag := to.Sub(from) - stallTick; lag > time.Millisecond {
				m.mu.Lock()
				m.stalls = append(m.stalls, stall{from, to, lag})
				m.mu.Unlock()
			}
		}
	}()
	return m
}

// runQueueWaits reads how long each thread of this process has waited to
// run; nil where Linux's schedstat is not there.
func runQueueWaits() map[string]time.Duration {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	waits := make(map[string]time.Duration, len(tasks))
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/schedstat")
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				waits[task.Name()] = time.Duration(ns)
			}
		}
	}
	return waits
}

// within is how long the process, or one of its threads, was kept off
// the CPU between from and to.
func (m *stallMonitor) within(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var whole time.Duration
	for _, s := range m.stalls {
		start, end := s.from, s.to
		if from.After(start) {
			start = from
		}
		if to.Before(end) {
			end = to
		}
		if overlap := end.Sub(start); overlap > 0 {
			whole += min(overlap, s.lag)
		}
	}
	// The readings that bracket the span: the last at or before from, the
	// first at or after to.
	var before, after *threadWaits
	for i := range m.waits {
		w := &m.waits[i]
		if !w.at.After(from) {
			before = w
		}
		if !w.at.Before(to) {
			after = w
			break
		}
	}
	var thread time.Duration
	if before != nil && after != nil {
		for tid, end := range after.wait {
			thread = max(thread, min(end-before.wait[tid], to.Sub(from)))
		}
	}
	return max(whole, thread)
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// answersWithin reports whether the server answers a PING within d.
func (f *faultScene) answersWithin(d time.Duration) bool {
	c := redis.NewClient(&redis.Options{Addr: f.server.Addr, MaxRetries: -1, DialTimeout: d, ReadTimeout: d, WriteTimeout: d})
	defer c.Close()
	return c.Ping(context.Background()).Err() == nil
}

func (f *faultScene) waitFor(cond func() bool) {
	f.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			f.t.Fatal("the fault never took hold")
		}
	}
}
