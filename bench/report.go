package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// summary is one target at one connection count: each figure the median
// over the rounds, taken on its own.
type summary struct {
	target               string
	conns                int
	rounds               int
	perSecond            float64
	p50, p99             time.Duration
	microsPerRequest     float64
	kernelShare          float64
	syscallsPerRequest   float64
	loadMicros           float64
	proxyCoreBusy        float64
	loadCoreBusy         float64
	otherCPU             float64
	redisCallsPerRequest float64
	redisMicrosPerCall   float64
	upstreamConns        float64
	upstreamRequestShare float64 // upstream requests per served request
	share429             float64 // 429s per access log line; NaN without an access log
	non2xxShare          float64
	socketErrors         int64 // summed over rounds
}

// median of xs, ignoring NaN; NaN when nothing is left.
func median(xs []float64) float64 {
	xs = slices.DeleteFunc(slices.Clone(xs), math.IsNaN)
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// summarize groups samples by connection count, then target, in the order
// they were first driven.
func summarize(samples []sample) []summary {
	type key struct {
		target string
		conns  int
	}
	var order []key
	groups := map[key][]sample{}
	for _, s := range samples {
		k := key{s.target, s.conns}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s)
	}
	slices.SortStableFunc(order, func(a, b key) int { return a.conns - b.conns })
	var out []summary
	for _, k := range order {
		g := groups[k]
		of := func(f func(sample) float64) float64 {
			xs := make([]float64, len(g))
			for i, s := range g {
				xs[i] = f(s)
			}
			return median(xs)
		}
		sum := summary{
			target:               k.target,
			conns:                k.conns,
			rounds:               len(g),
			perSecond:            of(func(s sample) float64 { return s.load.perSecond }),
			p50:                  time.Duration(of(func(s sample) float64 { return float64(s.load.p50) })),
			p99:                  time.Duration(of(func(s sample) float64 { return float64(s.load.p99) })),
			microsPerRequest:     of(func(s sample) float64 { return s.microsPerRequest }),
			kernelShare:          of(func(s sample) float64 { return s.kernelShare }),
			syscallsPerRequest:   of(func(s sample) float64 { return s.syscallsPerRequest }),
			loadMicros:           of(func(s sample) float64 { return s.loadMicrosPerRequest }),
			proxyCoreBusy:        of(func(s sample) float64 { return s.proxyCoreBusy }),
			loadCoreBusy:         of(func(s sample) float64 { return s.loadCoreBusy }),
			otherCPU:             of(func(s sample) float64 { return s.otherCPU }),
			redisCallsPerRequest: of(func(s sample) float64 { return s.redisCallsPerRequest }),
			redisMicrosPerCall:   of(func(s sample) float64 { return s.redisMicrosPerCall }),
			upstreamConns:        of(func(s sample) float64 { return float64(s.upstreamConns) }),
			upstreamRequestShare: of(func(s sample) float64 { return float64(s.upstreamRequests) / float64(s.served) }),
			non2xxShare:          of(func(s sample) float64 { return float64(s.load.non2xx) / float64(s.load.requests) }),
			share429: of(func(s sample) float64 {
				// A log that leaves denials out cannot give their share.
				if s.accessLogLines <= 0 || s.accessLogLines < s.load.requests {
					return math.NaN()
				}
				return float64(s.status429) / float64(s.accessLogLines)
			}),
		}
		for _, s := range g {
			sum.socketErrors += s.load.errors
		}
		out = append(out, sum)
	}
	return out
}

func formatMillis(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// orDash formats f, or "–" when it is NaN.
func orDash(format string, f float64) string {
	if math.IsNaN(f) {
		return "–"
	}
	return fmt.Sprintf(format, f)
}

func thousands(f float64) string {
	s := fmt.Sprintf("%.0f", f)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// report is the markdown for one mode.
func (h *harness) report(mode string, samples []sample) string {
	sums := summarize(samples)
	var b strings.Builder
	switch mode {
	case "main":
		fmt.Fprintf(&b, "### Main mode: a limit that never denies (medians of %d interleaved rounds of %s)\n\n", h.s.rounds, h.s.duration)
		b.WriteString("| target | conns | req/s | p50 | p99 | CPU µs/req | of it in the kernel | syscalls/req | load-side CPU µs/req | proxy core busy | load core busy | other CPU | Redis calls/req | Redis µs/call | new upstream conns/run |\n")
		b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, s := range sums {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %.1f | %.0f%% | %s | %.1f | %.0f%% | %.0f%% | %.0f%% | %s | %s | %.0f |\n",
				s.target, s.conns, thousands(s.perSecond), formatMillis(s.p50), formatMillis(s.p99), s.microsPerRequest, 100*s.kernelShare, orDash("%.2f", s.syscallsPerRequest), s.loadMicros,
				100*s.proxyCoreBusy, 100*s.loadCoreBusy, 100*s.otherCPU, orDash("%.2f", s.redisCallsPerRequest), orDash("%.1f", s.redisMicrosPerCall), s.upstreamConns)
		}
		b.WriteString(ratioTable(samples, append(slices.Clone(h.baselines), h.rotations...)))
	case "flood":
		fmt.Fprintf(&b, "### Flood mode: one subject over a 5/min limit (medians of %d interleaved rounds of %s)\n\n", h.s.rounds, h.s.duration)
		b.WriteString("| target | conns | req/s | p50 | p99 | 429 share | CPU µs/req | proxy core busy | load core busy | other CPU | Redis calls/req | upstream reqs/req |\n")
		b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, s := range sums {
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %.1f | %.0f%% | %.0f%% | %.0f%% | %s | %.5f |\n",
				s.target, s.conns, thousands(s.perSecond), formatMillis(s.p50), formatMillis(s.p99), orDash("%.3f%%", 100*s.share429),
				s.microsPerRequest, 100*s.proxyCoreBusy, 100*s.loadCoreBusy, 100*s.otherCPU, orDash("%.4f", s.redisCallsPerRequest), s.upstreamRequestShare)
		}
	}
	b.WriteString(warnings(mode, sums))
	b.WriteString("\n")
	return b.String()
}

// ratioTable compares targets at each connection count, and each
// rotation of subjects with its hot key; a ratio whose targets did not
// both run is left out. Each ratio is the median over the rounds of that
// round's own ratio: the two targets of a round ran within a minute of
// each other (in the reverse order every other round, runMode), so a
// machine whose speed moves between rounds moves both sides of a round's
// ratio, where the medians of each target over the rounds can come from
// rounds of different speeds.
func ratioTable(samples []sample, rotations [][2]string) string {
	type pair struct{ label, num, den string }
	var pairs []pair
	for _, r := range rotations {
		pairs = append(pairs, pair{r[0] + " / " + r[1], r[0], r[1]})
	}
	pairs = append(pairs, []pair{
		{"gateway-memory / bare-proxy", "gateway-memory", "bare-proxy"},
		{"gateway-redis / gateway-memory", "gateway-redis", "gateway-memory"},
		{"gateway-redis-inflight / gateway-redis", "gateway-redis-inflight", "gateway-redis"},
		{"gateway-redis-lease / gateway-memory", "gateway-redis-lease", "gateway-memory"},
		{"gateway-memory / nginx", "gateway-memory", "nginx"},
		{"gateway-redis / nginx", "gateway-redis", "nginx"},
		{"bare-proxy / nginx", "bare-proxy", "nginx"},
	}...)
	type key struct {
		target       string
		conns, round int
	}
	byKey := map[key]*sample{}
	var conns []int
	for i, s := range samples {
		byKey[key{s.target, s.conns, s.round}] = &samples[i]
		if !slices.Contains(conns, s.conns) {
			conns = append(conns, s.conns)
		}
	}
	var b strings.Builder
	b.WriteString("\n| req/s ratio (CPU µs/req ratio), median of the rounds' own · each round's |")
	for _, c := range conns {
		fmt.Fprintf(&b, " %d conns |", c)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(conns)) + "\n")
	rows := 0
	for _, p := range pairs {
		line := "| " + p.label + " |"
		present := false
		for _, c := range conns {
			var perSecond, micros []float64
			for _, s := range samples {
				if s.target != p.num || s.conns != c {
					continue
				}
				if den := byKey[key{p.den, c, s.round}]; den != nil {
					perSecond = append(perSecond, s.load.perSecond/den.load.perSecond)
					micros = append(micros, s.microsPerRequest/den.microsPerRequest)
				}
			}
			if len(perSecond) == 0 {
				line += " – |"
				continue
			}
			present = true
			line += fmt.Sprintf(" %.2f (%.2f) · %s |", median(perSecond), median(micros), eachRound(perSecond, micros))
		}
		if present {
			b.WriteString(line + "\n")
			rows++
		}
	}
	if rows == 0 {
		return ""
	}
	return b.String()
}

// eachRound is each round's req/s ratio and, in brackets, its CPU µs/req
// ratio, in the order the rounds ran: one lucky round shows as one.
func eachRound(perSecond, micros []float64) string {
	parts := make([]string, len(perSecond))
	for i := range perSecond {
		parts[i] = fmt.Sprintf("%.2f (%.2f)", perSecond[i], micros[i])
	}
	return strings.Join(parts, ", ")
}

// warnings point at runs whose figures mean something else than the
// table's heading says.
func warnings(mode string, sums []summary) string {
	var b strings.Builder
	for _, s := range sums {
		if s.otherCPU > 0.15 {
			fmt.Fprintf(&b, "\n- warning: %s at %d conns: other work took %.0f%% of a core in the median run; more rounds or a quieter machine", s.target, s.conns, 100*s.otherCPU)
		}
		if mode == "main" && s.non2xxShare > 0 {
			fmt.Fprintf(&b, "\n- warning: %s at %d conns answered %.3f%% of requests with a non-2xx status", s.target, s.conns, 100*s.non2xxShare)
		}
		if mode == "flood" && !math.IsNaN(s.share429) && s.non2xxShare-s.share429 > 0.0001 {
			fmt.Fprintf(&b, "\n- warning: %s at %d conns: %.3f%% non-2xx but only %.3f%% 429 (503s?)", s.target, s.conns, 100*s.non2xxShare, 100*s.share429)
		}
		if s.socketErrors > 0 {
			fmt.Fprintf(&b, "\n- warning: %s at %d conns: %d socket errors over the rounds", s.target, s.conns, s.socketErrors)
		}
	}
	if b.Len() > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

// setupNotes say how the figures were taken.
func (h *harness) setupNotes() string {
	var b strings.Builder
	b.WriteString("How these were taken:\n")
	if h.pin.taskset != "" {
		b.WriteString("- pinned with taskset: each proxy on CPU 0, where nothing else the harness starts runs; the load generator, the upstream and redis-server share CPU 1\n")
	}
	fmt.Fprintf(&b, "- %s; %s\n", strings.Join(h.environment, ", "), cpuModel())
	if h.driven["upstream-direct"] {
		b.WriteString("- upstream-direct is the harness's upstream without a proxy (its CPU is the upstream's, on the load core): the ceiling of the load side\n")
	}
	b.WriteString("- CPU µs/req: utime+stime of the proxy's processes (/proc/<pid>/stat) over the run, divided by the requests it served (the largest of the load generator's count, the access log lines and the upstream's count); of it in the kernel: stime's share\n")
	if h.perf != "" {
		b.WriteString("- syscalls/req: the proxy's processes' raw_syscalls:sys_enter over the run (perf stat -p, on the load CPU), divided by the requests it served\n")
	}
	b.WriteString("- proxy/load core busy: /proc/stat of CPU 0 and CPU 1; other CPU: time charged to processes the harness did not start, in % of one core (noise; high means another job shared the machine)\n")
	b.WriteString("- Redis: EVALSHA calls and usec from INFO commandstats of the private redis-server, over the run, per served request and per call\n")
	dedup := "dedup on"
	if !h.s.dedup {
		dedup = "dedup OFF (-dedup=false)"
	}
	b.WriteString("- gateways: one route, subject client_ip (one hot key, 127.0.0.1), " + dedup + ", access log on with stderr appended to a file in the temporary folder (emptied after each run)\n")
	if len(h.rotations) > 0 {
		fmt.Fprintf(&b, "- *-%s rows: the same gateway process as the row it is compared with, driven from %d client addresses in turn (10.0.0.0 up, one per request, in X-Forwarded-For; the gateways trust 127.0.0.1 as a proxy in this run): as many subjects, each a key of its own\n",
			strings.TrimPrefix(rotationName("", h.s.subjects), "-"), h.s.subjects)
	}
	if h.driven["nginx"] {
		b.WriteString("- nginx: one worker, limit_req on $binary_remote_addr, keepalive to the upstream, a JSON access log to a file\n")
	}
	for _, n := range h.notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}

// scaleReport is the mode's markdown: each phase, each phase per shard,
// and the sizing the medians give.
func (h *harness) scaleReport(shards []*shard, phases []phase, keys []int64, scriptCommands []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Scale run: %d gateways on a %d-master Redis Cluster (%d rounds of %s; conns: over all the gateways, one wrk each)\n\n",
		scaleGateways, len(shards), h.s.rounds, h.s.duration)
	b.WriteString("| round | route | conns | req/s | p99 (worst gateway) | EVALSHA/req | commands in scripts/EVALSHA | EVALSHA wall µs/call | other calls/req | calls per write | Redis CPU µs/req | Redis CPU µs/decision | gateways' CPU µs/req | core 0 / core 1 busy | other CPU | non-2xx |\n")
	b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range phases {
		perReq, perDecision := p.redisMicros()
		calls := float64(sum(p.evalsha))
		fmt.Fprintf(&b, "| %d | %s | %d | %s | %s | %.4f | %.2f | %.1f | %.4f | %.2f | %.2f | %.1f | %.1f | %.0f%% / %.0f%% | %.0f%% | %d |\n",
			p.round, p.route.name, p.conns, thousands(p.load.perSecond), formatMillis(p.load.p99), calls/float64(p.served),
			float64(sum(p.inScript))/calls, float64(sum(p.evalMicros))/calls, float64(sum(p.otherCalls))/float64(p.served), p.batchMean,
			perReq, perDecision, p.gatewayMu, 100*p.proxyBusy, 100*p.loadBusy, 100*p.otherCPU, p.load.non2xx)
	}
	b.WriteString("\nPer shard:\n\n| round | route | conns | shard (slots) | share of decisions | EVALSHA/req | other calls/req | Redis CPU µs/decision | busy (less idle) |\n")
	b.WriteString("| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range phases {
		for k, s := range shards {
			fmt.Fprintf(&b, "| %d | %s | %d | %d (%d–%d) | %.1f%% | %.4f | %.4f | %s | %.1f%% |\n", p.round, p.route.name, p.conns, k+1, s.first, s.last,
				100*p.share(k), float64(p.evalsha[k])/float64(p.served), float64(p.otherCalls[k])/float64(p.served),
				orDash("%.1f", p.shardMicrosPerDecision(k)), 100*p.redisCPU[k]/p.wallSeconds)
		}
	}
	fmt.Fprintf(&b, "\nSizing (medians over the rounds; a shard planned at %.0f%% of its one core, the load spread evenly over the shards):\n\n", 100*shardUtilisation)
	b.WriteString("| policy | conns | Redis CPU µs/request | Redis CPU µs/decision | Redis cores per 1M req/s | shards per 1M req/s |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: |\n")
	hotKey := ""
	most := slices.Max(h.s.conns)
	for _, r := range []scaleRoute{exactNew, scaleRoutes[0], scaleRoutes[1]} {
		conns := h.s.conns
		if r == exactNew {
			conns = []int{most} // the first pass runs at the most
		}
		for _, c := range conns {
			var perReq, perDecision []float64
			for _, p := range phases {
				if p.route == r && p.conns == c {
					a, d := p.redisMicros()
					perReq, perDecision = append(perReq, a), append(perDecision, d)
				}
			}
			if len(perReq) == 0 {
				continue
			}
			cores, n := sizing(sizingRate, median(perReq), shardUtilisation)
			label := "exact (one decision a request), the subject's key in place"
			switch {
			case r == exactNew:
				label = "exact, each request its subject's first in the window (creates the key)"
			case r.requestsPerDecision > 1:
				label = fmt.Sprintf("leased (lease = %d)", r.requestsPerDecision)
				if c == most {
					hotKey = fmt.Sprintf("\nOne hot key is on one shard whatever their number: with lease = %d at %.1f µs a decision (%d conns) it is served up to %s req/s at %.0f%% of that shard's core.\n",
						r.requestsPerDecision, median(perDecision), c, thousands(hotKeyCeiling(median(perDecision), r.requestsPerDecision, shardUtilisation)), 100*shardUtilisation)
				}
			}
			fmt.Fprintf(&b, "| %s | %d | %.2f | %.1f | %.2f | %d |\n", label, c, median(perReq), median(perDecision), cores, n)
		}
	}
	b.WriteString(hotKey)
	b.WriteString("\nHow these were taken:\n")
	fmt.Fprintf(&b, "- %s; %s\n", strings.Join(h.environment, ", "), cpuModel())
	if h.pin.taskset != "" {
		b.WriteString("- pinned with taskset: the gateways on CPU 0; the shards, the upstream and the generators (one per gateway) on CPU 1\n")
	}
	fmt.Fprintf(&b, "- exact: route / with a fixed window never reached, subject client_ip, %s subjects in turn in X-Forwarded-For (each generator from its own part of the rotation, on from where it stopped); leased: route /hot, the same window with lease = %d, one subject (127.0.0.1) on every gateway\n",
		thousands(scaleSubjects), scaleLease)
	var others []string
	for _, p := range phases {
		others = append(others, p.otherNames...)
	}
	slices.Sort(others)
	fmt.Fprintf(&b, "- calls from INFO commandstats of each shard over the phase: EVALSHA (its wall µs/call is commandstats' usec: the script's time from start to end, with any time the shard was preempted on its shared core), the commands the scripts ran (%s), and the other calls the gateways sent (%s; the harness's INFO left out); calls per write: gateway_redis_batch_size over the gateways\n",
		strings.Join(scriptCommands, ", "), strings.Join(slices.Compact(others), ", "))
	var idle []string
	for _, s := range shards {
		idle = append(idle, fmt.Sprintf("%.2f%%", 100*s.idleCores))
	}
	fmt.Fprintf(&b, "- Redis CPU: used_cpu_user + used_cpu_sys of INFO cpu over the phase, less each shard's idle CPU (%s of a core, measured over 2 s with the gateways up and no load); a decision: a request of exact, %d of leased; a shard's share of decisions is its share of the EVALSHA calls\n",
		strings.Join(idle, ", "), scaleLease)
	fmt.Fprintf(&b, "- a PING costs a shard %.1f µs of CPU alone and %.1f µs in pipelines of 16 (20,000 from the harness over 8 connections, shard 1, no other load): the part of a call that is not its command\n",
		h.pingMicros[1], h.pingMicros[16])
	var keyShares []string
	for _, n := range keys {
		keyShares = append(keyShares, fmt.Sprintf("%.1f%%", 100*float64(n)/float64(max(sum(keys), 1))))
	}
	fmt.Fprintf(&b, "- keys on the shards at the end: %s of %s\n", strings.Join(keyShares, ", "), thousands(float64(sum(keys))))
	for _, n := range h.notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	return b.String()
}
