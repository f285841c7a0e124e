package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The scale mode starts a 3-master Redis Cluster of its own and
// scaleGateways gateways on it, each with two routes: "exact", a fixed
// window that is never reached, driven from a rotation of scaleSubjects
// client addresses (one Redis decision per request), and "leased", the
// same window with lease = scaleLease on one subject, the hot key (one
// decision per scaleLease requests). Each round drives the two routes in
// phases of their own, spread over every gateway (one wrk each), so that
// what each shard spent in a phase is that route's: its calls from INFO
// commandstats, its CPU from INFO cpu, less what it spends idle. The
// report gives them per request, per decision and per shard, and the
// sizing they imply.
const (
	scaleGateways = 8
	scaleShards   = 3
	scaleSubjects = 100_000
	scaleLease    = 50
	clusterSlots  = 16384
	// shardUtilisation is the share of its one core a shard is planned
	// to use in the sizing table: redis-server runs commands on one
	// thread, and headroom keeps its latency flat.
	shardUtilisation = 0.7
	// sizingRate is the rate the sizing table is for.
	sizingRate = 1_000_000
)

// scaleRoute is one of the gateways' two routes and the load it gets.
type scaleRoute struct {
	name     string
	path     string
	subjects int // client addresses of its rotation; 0: one subject
	// requestsPerDecision is how many requests one Redis decision
	// serves: one for an exact policy, the lease for a leased one.
	requestsPerDecision int
}

var scaleRoutes = []scaleRoute{
	{name: "exact", path: "/", subjects: scaleSubjects, requestsPerDecision: 1},
	{name: "leased", path: "/hot", requestsPerDecision: scaleLease},
}

// exactNew is the exact route in the rotation's first pass, when each
// request is its subject's first in the window and creates its key.
var exactNew = scaleRoute{name: "exact-new", path: "/", subjects: scaleSubjects, requestsPerDecision: 1}

// scaleGatewayConfig is a gateway of the scale run: main mode's file with
// the Redis limiter in cluster mode on addrs, the load side trusted as a
// proxy, no access log (eight gateways share one core), and a second
// route, /hot, whose policy takes leases.
func scaleGatewayConfig(listen, admin, upstream string, addrs []string, dedup bool) (string, error) {
	const seed = "127.0.0.1:1"
	conf := gatewayConfig("main", "gateway-redis", listen, admin, upstream, seed, dedup, true)
	var quoted []string
	for _, a := range addrs {
		quoted = append(quoted, strconv.Quote(a))
	}
	for _, r := range [][2]string{
		{fmt.Sprintf("    mode       = \"standalone\"\n    addrs      = [%q]\n", seed),
			fmt.Sprintf("    mode       = \"cluster\"\n    addrs      = [%s]\n", strings.Join(quoted, ", "))},
		{"  access = true\n", "  access = false\n"},
	} {
		if !strings.Contains(conf, r[0]) {
			return "", fmt.Errorf("scale: the gateway's file no longer holds %q", r[0])
		}
		conf = strings.Replace(conf, r[0], r[1], 1)
	}
	return conf + fmt.Sprintf(`
policy "bench-hot" {
  algorithm = "fixed-window"
  limit     = %d
  window    = %q
  lease     = %d
  dedup {
    enabled = %t
  }
}

route "hot" {
  path     = "/hot"
  upstream = "http://%s"
  policy   = "bench-hot"
  subject  = ["client_ip"]
}
`, modeLimits["main"], modeWindows["main"], scaleLease, dedup, upstream), nil
}

// scaleGateway is one gateway process and its two routes' targets, in
// the order of scaleRoutes.
type scaleGateway struct {
	proc    *process
	admin   string
	targets []*target
}

func (h *harness) startScaleGateways(ctx context.Context, shards []*shard) ([]*scaleGateway, error) {
	var addrs []string
	for _, s := range shards {
		addrs = append(addrs, s.addr)
	}
	var gateways []*scaleGateway
	for g := range scaleGateways {
		listen, err1 := freeAddr()
		admin, err2 := freeAddr()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		src, err := scaleGatewayConfig(listen, admin, h.upstreamAddr, addrs, h.s.dedup)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("gateway-%d", g+1)
		conf := filepath.Join(h.dir, name+"-scale.hcl")
		if err := os.WriteFile(conf, []byte(src), 0o644); err != nil {
			return nil, err
		}
		p, err := h.launchGateway(ctx, name, h.gatewayBin, conf, admin, filepath.Join(h.dir, name+"-scale.log"))
		if err != nil {
			return nil, err
		}
		gw := &scaleGateway{proc: p, admin: admin}
		for _, r := range scaleRoutes {
			// Each gateway starts its part of the rotation at its own
			// place, so a phase walks the subjects once, not eight times
			// over its first part.
			gw.targets = append(gw.targets, &target{name: name + "-" + r.name, url: "http://" + listen + r.path, proc: p,
				subjects: r.subjects, rotationFrom: g * scaleSubjects / scaleGateways})
		}
		gateways = append(gateways, gw)
	}
	return gateways, nil
}

// driveAll runs one generator per target at once, conns spread over them,
// and sums what they report; p99 is the largest of theirs. A target of a
// rotation goes on next time where this run left it.
func (h *harness) driveAll(ctx context.Context, targets []*target, conns int, d time.Duration) (loadResult, error) {
	results := make([]loadResult, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() { results[i], errs[i] = h.loader.run(ctx, h.pin, t, max(conns/len(targets), 1), d) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return loadResult{}, err
	}
	var sum loadResult
	for i, r := range results {
		sum.requests += r.requests
		sum.perSecond += r.perSecond
		sum.seconds = max(sum.seconds, r.seconds)
		sum.p50, sum.p99 = max(sum.p50, r.p50), max(sum.p99, r.p99)
		sum.non2xx += r.non2xx
		sum.errors += r.errors
		sum.cpuSeconds += r.cpuSeconds
		if t := targets[i]; t.subjects > 1 {
			t.rotationFrom = int((int64(t.rotationFrom) + r.requests) % int64(t.subjects))
		}
	}
	return sum, nil
}

// scaleSnapshot is every counter a phase is measured by.
type scaleSnapshot struct {
	at           time.Time
	shardCPU     []float64 // seconds, used_cpu_user + used_cpu_sys
	shardCalls   []map[string]commandStat
	gatewayTicks int64
	ownTicks     int64
	cpus         map[string]cpuTimes
	batchSum     float64 // gateway_redis_batch_size, over the gateways
	batchCount   float64
	upstream     upstreamCounters
}

func (h *harness) scaleSnapshot(ctx context.Context, shards []*shard, gateways []*scaleGateway) (scaleSnapshot, error) {
	s := scaleSnapshot{at: time.Now()}
	for _, sh := range shards {
		info, err := sh.client.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return s, fmt.Errorf("INFO on %s: %w", sh.addr, err)
		}
		cpu, err := infoCPUSeconds(info)
		if err != nil {
			return s, fmt.Errorf("INFO cpu on %s: %w", sh.addr, err)
		}
		s.shardCPU = append(s.shardCPU, cpu)
		s.shardCalls = append(s.shardCalls, parseCommandStats(info))
	}
	table, err := readProcessTable()
	if err != nil {
		return s, err
	}
	for _, g := range gateways {
		ticks, ok := table.treeTicks(g.proc.pid())
		if !ok {
			return s, fmt.Errorf("%s is gone:%s", g.proc.name, g.proc.logTail())
		}
		s.gatewayTicks += ticks.all
		sum, count, err := h.batchSizes(ctx, g.admin)
		if err != nil {
			return s, err
		}
		s.batchSum += sum
		s.batchCount += count
	}
	own, _ := table.treeTicks(os.Getpid())
	s.ownTicks = own.all
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	s.cpus = parseCPUTimes(string(b))
	s.upstream, err = h.upstreamCounters(ctx)
	return s, err
}

// batchSizes reads gateway_redis_batch_size's sum and count from a
// gateway's /metrics.
func (h *harness) batchSizes(ctx context.Context, admin string) (sum, count float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := h.statsClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("gateway metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("gateway metrics: %w", err)
	}
	return promSumCount(string(b), "gateway_redis_batch_size")
}

// promSumCount reads a histogram's _sum and _count from Prometheus text.
func promSumCount(text, name string) (sum, count float64, err error) {
	found := 0
	for line := range strings.SplitSeq(text, "\n") {
		metric, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		var into *float64
		switch metric {
		case name + "_sum":
			into = &sum
		case name + "_count":
			into = &count
		default:
			continue
		}
		if *into, err = strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil {
			return 0, 0, fmt.Errorf("%s: %w", metric, err)
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("no %s_sum and _count in the metrics", name)
	}
	return sum, count, nil
}

// phase is one route's load over every gateway in one round.
type phase struct {
	round       int
	route       scaleRoute
	conns       int
	load        loadResult
	served      int64
	gatewayMu   float64 // the gateways' CPU µs per request
	proxyBusy   float64 // CPU 0, where the gateways run
	loadBusy    float64 // CPU 1: generators, upstream, the shards
	otherCPU    float64 // cores taken by processes the harness did not start
	batchMean   float64 // script calls per write, over the gateways
	evalsha     []int64 // per shard
	evalMicros  []int64 // per shard: EVALSHA's own time in commandstats
	inScript    []int64 // per shard: commands the scripts ran
	otherCalls  []int64 // per shard: every other command, less the harness's INFO
	redisCPU    []float64
	otherNames  []string // the other commands seen
	wallSeconds float64
}

// phaseDelta is what happened between two snapshots; each shard's CPU
// less what it spends idle over as long. Redis counts the commands a
// script runs in commandstats as if a client had sent them: those named
// in scriptCommands are counted apart.
func phaseDelta(before, after scaleSnapshot, shards []*shard, scriptCommands []string) phase {
	p := phase{wallSeconds: after.at.Sub(before.at).Seconds()}
	for k := range shards {
		var ev, evMicros, inScript, other int64
		for name, a := range after.shardCalls[k] {
			n := a.calls - before.shardCalls[k][name].calls
			switch {
			case name == "evalsha":
				ev, evMicros = n, a.micros-before.shardCalls[k][name].micros
			case slices.Contains(scriptCommands, name):
				inScript += n
			case name == "info":
				n-- // the harness's own, in the snapshot before
				fallthrough
			default:
				if n > 0 {
					other += n
					if !slices.Contains(p.otherNames, name) {
						p.otherNames = append(p.otherNames, name)
					}
				}
			}
		}
		p.evalsha = append(p.evalsha, ev)
		p.evalMicros = append(p.evalMicros, evMicros)
		p.inScript = append(p.inScript, inScript)
		p.otherCalls = append(p.otherCalls, other)
		p.redisCPU = append(p.redisCPU, max(after.shardCPU[k]-before.shardCPU[k]-shards[k].idleCores*p.wallSeconds, 0))
	}
	if n := after.batchCount - before.batchCount; n > 0 {
		p.batchMean = (after.batchSum - before.batchSum) / n
	}
	p.proxyBusy = busyShare(before.cpus, after.cpus, proxyCPU)
	p.loadBusy = busyShare(before.cpus, after.cpus, loadCPU)
	return p
}

// share is the part of the phase's decisions shard k made: its EVALSHA
// calls over all of them (a call decides one subject's requests, and a
// subject's keys are on one slot).
func (p phase) share(k int) float64 {
	var all int64
	for _, n := range p.evalsha {
		all += n
	}
	if all == 0 {
		return math.NaN()
	}
	return float64(p.evalsha[k]) / float64(all)
}

// decisions the phase asked of Redis: one per request, or per lease.
func (p phase) decisions() float64 {
	return float64(p.served) / float64(p.route.requestsPerDecision)
}

// redisMicros is the Redis CPU per request and per decision, over every
// shard.
func (p phase) redisMicros() (perRequest, perDecision float64) {
	var cpu float64
	for _, c := range p.redisCPU {
		cpu += c
	}
	return cpu * 1e6 / float64(p.served), cpu * 1e6 / p.decisions()
}

// shardMicrosPerDecision is shard k's CPU per decision it made; NaN for a
// shard that made under 1% of them.
func (p phase) shardMicrosPerDecision(k int) float64 {
	share := p.share(k)
	if math.IsNaN(share) || share < 0.01 {
		return math.NaN()
	}
	return p.redisCPU[k] * 1e6 / (p.decisions() * share)
}

// sizing is what a rate of requests costs Redis at microsPerRequest of
// its CPU each: the cores, and the shards when each is planned at
// utilisation of its one core and the load spreads evenly over them.
func sizing(rate, microsPerRequest, utilisation float64) (cores float64, shards int) {
	cores = rate * microsPerRequest / 1e6
	return cores, max(int(math.Ceil(cores/utilisation-1e-9)), 1)
}

// hotKeyCeiling is the most requests a second one hot key can be served
// at, its leases costing microsPerDecision each on its one shard, planned
// at utilisation of that shard's core.
func hotKeyCeiling(microsPerDecision float64, lease int, utilisation float64) float64 {
	return utilisation * 1e6 / microsPerDecision * float64(lease)
}

func (h *harness) runScale(ctx context.Context, stdout io.Writer) error {
	scriptCommands, err := scriptCommandsIn(filepath.Join(h.s.repo, "lua"))
	if err != nil {
		return err
	}
	shards, err := h.startCluster(ctx)
	for _, s := range shards {
		defer s.client.Close()
	}
	if err != nil {
		return err
	}
	h.logf("scale: Cluster of %d masters up; starting %d gateways", len(shards), scaleGateways)
	gateways, err := h.startScaleGateways(ctx, shards)
	if err != nil {
		return err
	}
	routeTargets := func(i int) []*target {
		var ts []*target
		for _, g := range gateways {
			ts = append(ts, g.targets[i])
		}
		return ts
	}
	conns := slices.Max(h.s.conns)
	var warm []loadResult
	for i, r := range scaleRoutes {
		h.logf("scale: warming %s for %s at %d connections", r.name, h.s.warmup, conns)
		res, err := h.driveAll(ctx, routeTargets(i), conns, h.s.warmup)
		if err != nil {
			return err
		}
		warm = append(warm, res)
	}
	if err := h.measureIdle(ctx, shards, 2*time.Second); err != nil {
		return err
	}
	phases, err := h.firstPass(ctx, shards, gateways, routeTargets(0), conns, warm[0].perSecond, scriptCommands)
	if err != nil {
		return err
	}
	for round := 1; round <= h.s.rounds; round++ {
		order := []int{0, 1}
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, c := range h.s.conns {
			for _, i := range order {
				if err := sleep(ctx, 300*time.Millisecond); err != nil {
					return err
				}
				p, err := h.measurePhase(ctx, shards, gateways, routeTargets(i), c, scriptCommands)
				if err != nil {
					return err
				}
				p.round, p.route = round, scaleRoutes[i]
				phases = append(phases, p)
				h.logPhase(p)
			}
		}
	}
	keys, err := keysOn(ctx, shards)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, h.scaleReport(shards, phases, keys, scriptCommands))
	return nil
}

// firstPass walks the exact route's rotation until every subject has its
// key. Its runs are measured, as round 0 of exactNew, while a whole run
// at the last rate fits in the subjects not yet seen; the rest is driven
// unmeasured, so that the rounds find every key in place.
func (h *harness) firstPass(ctx context.Context, shards []*shard, gateways []*scaleGateway, targets []*target, conns int, rate float64, scriptCommands []string) ([]phase, error) {
	var phases []phase
	for deadline := time.Now().Add(3 * time.Minute); ; {
		keys, err := keysOn(ctx, shards)
		if err != nil {
			return nil, err
		}
		left := float64(scaleSubjects + 1 - sum(keys)) // and the hot key's
		if left <= 0 {
			return phases, nil
		}
		if time.Now().After(deadline) {
			h.note("the first pass left %.0f of the %s subjects without a key after 3 minutes: the rounds' exact runs create them", left, thousands(scaleSubjects))
			return phases, nil
		}
		if rate*h.s.duration.Seconds() <= 0.8*left {
			p, err := h.measurePhase(ctx, shards, gateways, targets, conns, scriptCommands)
			if err != nil {
				return nil, err
			}
			p.route, rate = exactNew, p.load.perSecond
			phases = append(phases, p)
			h.logPhase(p)
			continue
		}
		d := time.Duration(math.Ceil(min(1.2*left/max(rate, 1), 10))) * time.Second
		h.logf("scale: %.0f subjects have no key yet; driving exact for %s unmeasured", left, d)
		if _, err := h.driveAll(ctx, targets, conns, d); err != nil {
			return nil, err
		}
	}
}

// keysOn counts the keys on each shard.
func keysOn(ctx context.Context, shards []*shard) ([]int64, error) {
	var keys []int64
	for _, s := range shards {
		n, err := s.client.DBSize(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("DBSIZE on %s: %w", s.addr, err)
		}
		keys = append(keys, n)
	}
	return keys, nil
}

func (h *harness) logPhase(p phase) {
	perReq, perDecision := p.redisMicros()
	h.logf("scale round %d/%d c=%d %-9s %7.0f req/s  evalsha %.3f/req  batch %.2f  redis %.2fµs/req %.1fµs/decision  gateways %.1fµs/req  core0 %.0f%% core1 %.0f%% other %.0f%%",
		p.round, h.s.rounds, p.conns, p.route.name, p.load.perSecond, float64(sum(p.evalsha))/float64(p.served), p.batchMean,
		perReq, perDecision, p.gatewayMu, 100*p.proxyBusy, 100*p.loadBusy, 100*p.otherCPU)
}

// measureIdle sets each shard's idle CPU: its CPU over d with the
// gateways running and no load.
func (h *harness) measureIdle(ctx context.Context, shards []*shard, d time.Duration) error {
	before, err := h.scaleSnapshot(ctx, shards, nil)
	if err != nil {
		return err
	}
	if err := sleep(ctx, d); err != nil {
		return err
	}
	after, err := h.scaleSnapshot(ctx, shards, nil)
	if err != nil {
		return err
	}
	for k, s := range shards {
		s.idleCores = (after.shardCPU[k] - before.shardCPU[k]) / after.at.Sub(before.at).Seconds()
	}
	for _, n := range []int{1, 16} {
		if h.pingMicros[n], err = shards[0].pingMicros(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (h *harness) measurePhase(ctx context.Context, shards []*shard, gateways []*scaleGateway, targets []*target, conns int, scriptCommands []string) (phase, error) {
	before, err := h.scaleSnapshot(ctx, shards, gateways)
	if err != nil {
		return phase{}, err
	}
	res, err := h.driveAll(ctx, targets, conns, h.s.duration)
	if err != nil {
		return phase{}, err
	}
	if err := sleep(ctx, settleTime); err != nil {
		return phase{}, err
	}
	after, err := h.scaleSnapshot(ctx, shards, gateways)
	if err != nil {
		return phase{}, err
	}
	p := phaseDelta(before, after, shards, scriptCommands)
	p.conns, p.load = conns, res
	p.served = max(res.requests, after.upstream.requests-before.upstream.requests)
	gatewayTicks := float64(after.gatewayTicks - before.gatewayTicks)
	p.gatewayMu = gatewayTicks * 1e6 / clockTicksPerSecond / float64(p.served)
	if core := after.cpus["cpu0"].total - before.cpus["cpu0"].total; core > 0 {
		own := float64(after.ownTicks-before.ownTicks) + res.cpuSeconds*clockTicksPerSecond
		p.otherCPU = max(float64(after.cpus["cpu"].tasks-before.cpus["cpu"].tasks)-own, 0) / float64(core)
	}
	return p, nil
}

func sum[T int64 | float64](xs []T) T {
	var s T
	for _, x := range xs {
		s += x
	}
	return s
}
