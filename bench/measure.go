package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicksPerSecond is USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: 100 on every Linux architecture Go runs on.
const clockTicksPerSecond = 100

// procStat is what the harness reads from one /proc/<pid>/stat line.
type procStat struct {
	ppid int
	cpuTicks
}

// cpuTicks is CPU time in clock ticks: in all (utime + stime, every
// thread), and of it in the kernel (stime).
type cpuTicks struct {
	all, sys int64
}

// parseProcStat reads a /proc/<pid>/stat line. The command name, in
// parentheses, may hold spaces and parentheses itself, so fields are
// counted from the last ')'.
func parseProcStat(line string) (procStat, error) {
	end := strings.LastIndexByte(line, ')')
	if end < 0 {
		return procStat{}, errors.New("proc stat: no command name")
	}
	// After the name: state(3) ppid(4) ... utime(14) stime(15).
	f := strings.Fields(line[end+1:])
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("proc stat: %d fields after the name, want at least 13", len(f))
	}
	ppid, err1 := strconv.Atoi(f[1])
	utime, err2 := strconv.ParseInt(f[11], 10, 64)
	stime, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return procStat{}, fmt.Errorf("proc stat: %w", err)
	}
	return procStat{ppid: ppid, cpuTicks: cpuTicks{all: utime + stime, sys: stime}}, nil
}

// processTable is every process's stat, read in one pass over /proc.
type processTable map[int]procStat

func readProcessTable() (processTable, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	table := processTable{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		if s, err := parseProcStat(string(b)); err == nil {
			table[pid] = s
		}
	}
	return table, nil
}

// tree is pid and every descendant (nginx's worker is the master's
// child), pid first; nil when pid is gone.
func (t processTable) tree(pid int) []int {
	if _, ok := t[pid]; !ok {
		return nil
	}
	children := map[int][]int{}
	for p, s := range t {
		children[s.ppid] = append(children[s.ppid], p)
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// treeTicks is the CPU time of pid and every descendant, in clock ticks;
// false when pid is gone.
func (t processTable) treeTicks(pid int) (cpuTicks, bool) {
	tree := t.tree(pid)
	var total cpuTicks
	for _, p := range tree {
		total.all += t[p].all
		total.sys += t[p].sys
	}
	return total, tree != nil
}

// cpuTimes is one "cpu" or "cpuN" line of /proc/stat, in clock ticks.
type cpuTimes struct {
	busy  int64 // all but idle and iowait
	tasks int64 // user, nice and system: the time processes are charged with
	total int64
}

// parseCPUTimes reads the "cpu" (every CPU) and "cpuN" lines of /proc/stat.
func parseCPUTimes(procStat string) map[string]cpuTimes {
	out := map[string]cpuTimes{}
	for line := range strings.SplitSeq(procStat, "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		var t cpuTimes
		// user nice system idle iowait irq softirq steal; guest and
		// guest_nice, after them, are already counted in user and nice.
		for i, v := range f[1:min(len(f), 9)] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				break
			}
			t.total += n
			if i != 3 && i != 4 {
				t.busy += n
			}
			if i <= 2 {
				t.tasks += n
			}
		}
		out[f[0]] = t
	}
	return out
}

// busyShare is the fraction of the interval CPU cpu spent busy.
func busyShare(before, after map[string]cpuTimes, cpu int) float64 {
	name := "cpu" + strconv.Itoa(cpu)
	b, a := before[name], after[name]
	if a.total <= b.total {
		return math.NaN()
	}
	return float64(a.busy-b.busy) / float64(a.total-b.total)
}

// commandStat is one command's line of INFO commandstats.
type commandStat struct {
	calls, micros int64
}

// parseCommandStats reads the reply of INFO commandstats, lines such as
//
//	cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,rejected_calls=0,failed_calls=0
func parseCommandStats(info string) map[string]commandStat {
	out := map[string]commandStat{}
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		name, fields, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s commandStat
		for kv := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				s.calls = n
			case "usec":
				s.micros = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return out
}

// upstreamCounters are the upstream's request and connection counts.
type upstreamCounters struct {
	requests, conns int64
}

func parseUpstreamCounters(s string) (upstreamCounters, error) {
	var c upstreamCounters
	_, err := fmt.Sscanf(s, "requests=%d conns=%d", &c.requests, &c.conns)
	return c, err
}

// snapshot is every counter a run is measured by, read just before and
// just after the load.
type snapshot struct {
	proxyTicks cpuTicks // the target's process tree
	ownTicks   int64    // the harness and every process it started
	cpus       map[string]cpuTimes
	evalsha    commandStat
	upstream   upstreamCounters
}

func (h *harness) snapshot(ctx context.Context, t *target) (snapshot, error) {
	var s snapshot
	table, err := readProcessTable()
	if err != nil {
		return s, err
	}
	var ok bool
	if s.proxyTicks, ok = table.treeTicks(t.proc.pid()); !ok {
		return s, fmt.Errorf("%s is gone:%s", t.name, t.proc.logTail())
	}
	// The harness is the parent of everything it started.
	own, _ := table.treeTicks(os.Getpid())
	s.ownTicks = own.all
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	s.cpus = parseCPUTimes(string(b))
	if t.redis {
		info, err := h.redisClient.Info(ctx, "commandstats").Result()
		if err != nil {
			return s, fmt.Errorf("redis INFO commandstats: %w", err)
		}
		s.evalsha = parseCommandStats(info)["evalsha"]
	}
	if s.upstream, err = h.upstreamCounters(ctx); err != nil {
		return s, err
	}
	return s, nil
}

func (h *harness) upstreamCounters(ctx context.Context) (upstreamCounters, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.upstreamAddr+upstreamStatsPath, nil)
	if err != nil {
		return upstreamCounters{}, err
	}
	resp, err := h.statsClient.Do(req)
	if err != nil {
		return upstreamCounters{}, fmt.Errorf("upstream counters: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return upstreamCounters{}, fmt.Errorf("upstream counters: %w", err)
	}
	return parseUpstreamCounters(string(b))
}

// sample is one measured run of one target.
type sample struct {
	target string
	conns  int
	round  int
	load   loadResult
	// served is how many requests the target handled: the largest of the
	// generator's count, the access log's lines and the upstream's count.
	// It is what the per-request CPU and Redis figures divide by.
	served           int64
	microsPerRequest float64 // CPU time of the target's processes per served request
	kernelShare      float64 // of that CPU time, the share in the kernel (stime)
	// syscallsPerRequest is what the target's processes asked of the
	// kernel per served request (perf stat, -syscalls); NaN without.
	syscallsPerRequest float64
	// loadMicrosPerRequest is the CPU time of everything else the harness
	// runs (the load generator, the upstream, redis-server, the harness)
	// per served request: CPU 1's cost, which bounds req/s when that core
	// is full.
	loadMicrosPerRequest float64
	proxyCoreBusy        float64 // share of CPU 0 busy during the run
	loadCoreBusy         float64 // share of CPU 1 busy during the run
	// otherCPU is CPU time, in cores, charged to processes the harness did
	// not start (another build or test on the machine), or to none: the
	// run's noise.
	otherCPU float64
	// redisCallsPerRequest and redisMicrosPerCall come from EVALSHA in
	// INFO commandstats; NaN for targets without Redis.
	redisCallsPerRequest float64
	redisMicrosPerCall   float64
	upstreamRequests     int64
	upstreamConns        int64 // connections the upstream accepted during the run
	accessLogLines       int64 // -1 when the target keeps no access log
	status429            int64 // 429 answers in the access log
	accessLogBytes       int64
}

// settleTime lets the requests in flight when the generator stops finish
// before the counters are read again.
const settleTime = 200 * time.Millisecond

// measure drives t once and reads what it cost.
func (h *harness) measure(ctx context.Context, t *target, conns, round int, d time.Duration) (sample, error) {
	before, err := h.snapshot(ctx, t)
	if err != nil {
		return sample{}, err
	}
	var count *syscallCount
	if h.perf != "" {
		if count, err = h.countSyscalls(t); err != nil {
			return sample{}, err
		}
	}
	res, err := h.loader.run(ctx, h.pin, t, conns, d)
	if err != nil {
		return sample{}, err
	}
	if err := sleep(ctx, settleTime); err != nil {
		return sample{}, err
	}
	after, err := h.snapshot(ctx, t)
	if err != nil {
		return sample{}, err
	}
	var syscalls float64
	if count != nil {
		if syscalls, err = count.stop(); err != nil {
			return sample{}, err
		}
	}
	s := sample{
		target:               t.name,
		conns:                conns,
		round:                round,
		load:                 res,
		proxyCoreBusy:        busyShare(before.cpus, after.cpus, proxyCPU),
		loadCoreBusy:         busyShare(before.cpus, after.cpus, loadCPU),
		redisCallsPerRequest: math.NaN(),
		syscallsPerRequest:   math.NaN(),
		redisMicrosPerCall:   math.NaN(),
		upstreamRequests:     after.upstream.requests - before.upstream.requests,
		upstreamConns:        after.upstream.conns - before.upstream.conns,
		accessLogLines:       -1,
	}
	if t.accessLog != "" {
		if s.accessLogLines, s.status429, s.accessLogBytes, err = drainAccessLog(t.accessLog); err != nil {
			return s, err
		}
	}
	// The most any count saw: the access log holds the requests in flight
	// when the generator stopped, but not every denial (the gateway logs
	// at most one a second per route and subject).
	s.served = max(res.requests, s.accessLogLines, s.upstreamRequests)
	proxy := cpuTicks{all: after.proxyTicks.all - before.proxyTicks.all, sys: after.proxyTicks.sys - before.proxyTicks.sys}
	s.microsPerRequest = float64(proxy.all) * 1e6 / clockTicksPerSecond / float64(s.served)
	if proxy.all > 0 {
		s.kernelShare = float64(proxy.sys) / float64(proxy.all)
	}
	if count != nil {
		s.syscallsPerRequest = syscalls / float64(s.served)
	}
	all, perCore := after.cpus["cpu"], after.cpus["cpu0"]
	all.tasks -= before.cpus["cpu"].tasks
	perCore.total -= before.cpus["cpu0"].total
	if perCore.total > 0 {
		own := float64(after.ownTicks-before.ownTicks) + res.cpuSeconds*clockTicksPerSecond
		s.loadMicrosPerRequest = (own - float64(proxy.all)) * 1e6 / clockTicksPerSecond / float64(s.served)
		s.otherCPU = max(float64(all.tasks)-own, 0) / float64(perCore.total)
	}
	if t.redis {
		calls := after.evalsha.calls - before.evalsha.calls
		s.redisCallsPerRequest = float64(calls) / float64(s.served)
		if calls > 0 {
			s.redisMicrosPerCall = float64(after.evalsha.micros-before.evalsha.micros) / float64(calls)
		}
	}
	return s, nil
}

// drainAccessLog counts the lines and 429 answers in an access log of
// JSON lines (the gateway's, and nginx's as the harness formats it), then
// empties it so the disk does not fill over a run.
func drainAccessLog(path string) (lines, status429, size int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("access log: %w", err)
	}
	lines = int64(bytes.Count(b, []byte{'\n'}))
	status429 = int64(bytes.Count(b, []byte(`"status":429`)))
	if err := os.Truncate(path, 0); err != nil {
		return 0, 0, 0, fmt.Errorf("access log: %w", err)
	}
	return lines, status429, int64(len(b)), nil
}
