package main

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/config"
)

func TestSlotRangesCoverEverySlotOnce(t *testing.T) {
	got := slotRanges(3)
	want := [][2]int{{0, 5460}, {5461, 10921}, {10922, 16383}}
	if !slices.Equal(got, want) {
		t.Errorf("slotRanges(3) = %v, want %v", got, want)
	}
	for _, n := range []int{1, 2, 3, 5, 7} {
		next := 0
		for _, r := range slotRanges(n) {
			if r[0] != next || r[1] < r[0] {
				t.Fatalf("slotRanges(%d) = %v: a gap or overlap at %d", n, slotRanges(n), next)
			}
			next = r[1] + 1
		}
		if next != clusterSlots {
			t.Errorf("slotRanges(%d) ends at %d, want %d", n, next-1, clusterSlots-1)
		}
	}
}

func TestInfoCPUSecondsAddsUserAndSystemOfTheServerAlone(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.000000\r\n" +
		"used_cpu_user_children:9.000000\r\nused_cpu_sys_main_thread:1.000000\r\nused_cpu_user_main_thread:2.000000\r\n"
	got, err := infoCPUSeconds(info)
	if err != nil || got != 3.75 {
		t.Errorf("infoCPUSeconds = %v, %v; want 3.75", got, err)
	}
	if _, err := infoCPUSeconds("# CPU\r\nused_cpu_sys:1.0\r\n"); err == nil {
		t.Error("a reply without used_cpu_user gave no error")
	}
}

func TestPromSumCountReadsTheHistogramNamedOnly(t *testing.T) {
	text := `# HELP gateway_redis_batch_size Script calls sent to Redis in one write.
# TYPE gateway_redis_batch_size histogram
gateway_redis_batch_size_bucket{le="1"} 90
gateway_redis_batch_size_bucket{le="+Inf"} 100
gateway_redis_batch_size_sum 130
gateway_redis_batch_size_count 100
gateway_redis_batch_size_other_sum 7
`
	sum, count, err := promSumCount(text, "gateway_redis_batch_size")
	if err != nil || sum != 130 || count != 100 {
		t.Errorf("promSumCount = %v, %v, %v; want 130, 100", sum, count, err)
	}
	if _, _, err := promSumCount("go_goroutines 8\n", "gateway_redis_batch_size"); err == nil {
		t.Error("metrics without the histogram gave no error")
	}
}

func TestCommandsCalledAreTheScriptsCallsInLowerCase(t *testing.T) {
	src := `local t = redis.call('TIME')
local v = redis.call("HMGET", KEYS[1], 'c', 's')
local ok = redis.pcall( 'PEXPIRE', KEYS[1], 10, 'GT')
redis.call('TIME')
-- redis.log is not a command`
	if got, want := commandsCalled(src), []string{"time", "hmget", "pexpire"}; !slices.Equal(got, want) {
		t.Errorf("commandsCalled = %v, want %v", got, want)
	}
}

// Two snapshots of a Cluster of two shards: the first made 300 EVALSHA
// calls (each with an HMGET and an HSET inside), the second 100; the
// harness's own INFO is no call of the gateways'.
func TestPhaseDeltaChargesEachShardItsOwnCallsAndCPU(t *testing.T) {
	shards := []*shard{{idleCores: 0.01}, {idleCores: 0}}
	at := time.Unix(1000, 0)
	before := scaleSnapshot{at: at, shardCPU: []float64{10, 20}, shardCalls: []map[string]commandStat{
		{"evalsha": {calls: 1000, micros: 5000}, "hmget": {calls: 1000}, "hset": {calls: 1000}, "info": {calls: 7}},
		{"evalsha": {calls: 50}, "info": {calls: 3}},
	}, batchSum: 100, batchCount: 90}
	after := scaleSnapshot{at: at.Add(2 * time.Second), shardCPU: []float64{10.05, 20.01}, shardCalls: []map[string]commandStat{
		{"evalsha": {calls: 1300, micros: 8000}, "hmget": {calls: 1300}, "hset": {calls: 1300}, "info": {calls: 8}, "ping": {calls: 2}},
		{"evalsha": {calls: 150}, "info": {calls: 4}},
	}, batchSum: 600, batchCount: 490}
	p := phaseDelta(before, after, shards, []string{"hmget", "hset"})
	p.route, p.served = scaleRoutes[0], 400
	if !slices.Equal(p.evalsha, []int64{300, 100}) || !slices.Equal(p.inScript, []int64{600, 0}) ||
		!slices.Equal(p.otherCalls, []int64{2, 0}) || !slices.Equal(p.evalMicros, []int64{3000, 0}) {
		t.Errorf("calls: evalsha %v, in scripts %v, other %v, evalsha µs %v", p.evalsha, p.inScript, p.otherCalls, p.evalMicros)
	}
	if !slices.Equal(p.otherNames, []string{"ping"}) {
		t.Errorf("other commands %v, want [ping]", p.otherNames)
	}
	// Shard 1: 0.05 s less 0.01 core idle over 2 s = 0.03 s.
	if math.Abs(p.redisCPU[0]-0.03) > 1e-9 || math.Abs(p.redisCPU[1]-0.01) > 1e-9 {
		t.Errorf("Redis CPU %v, want [0.03 0.01]", p.redisCPU)
	}
	if p.batchMean != 1.25 {
		t.Errorf("calls per write %v, want 1.25", p.batchMean)
	}
	if p.share(0) != 0.75 || p.share(1) != 0.25 {
		t.Errorf("shares %v and %v, want 0.75 and 0.25", p.share(0), p.share(1))
	}
	perReq, perDecision := p.redisMicros()
	if math.Abs(perReq-100) > 1e-9 || math.Abs(perDecision-100) > 1e-9 {
		t.Errorf("exact: %v µs/req, %v µs/decision; want 100 and 100", perReq, perDecision)
	}
	if got := p.shardMicrosPerDecision(0); math.Abs(got-100) > 1e-9 {
		t.Errorf("shard 1: %v µs/decision, want 100 (0.03 s over 300 decisions)", got)
	}
	p.route = scaleRoutes[1] // the same counts as a leased route's: a decision is 50 requests
	if _, perDecision := p.redisMicros(); math.Abs(perDecision-5000) > 1e-9 {
		t.Errorf("leased: %v µs/decision, want 5000 (0.04 s over 8 decisions)", perDecision)
	}
}

func TestAShardWithoutDecisionsHasNoCostPerDecision(t *testing.T) {
	p := phase{route: scaleRoutes[1], served: 5000, evalsha: []int64{0, 100, 0}, redisCPU: []float64{0.0001, 0.02, 0}}
	if got := p.shardMicrosPerDecision(0); !math.IsNaN(got) {
		t.Errorf("a shard with no EVALSHA: %v µs/decision, want NaN", got)
	}
	if got := p.shardMicrosPerDecision(1); math.Abs(got-200) > 1e-9 {
		t.Errorf("the hot key's shard: %v µs/decision, want 200 (0.02 s over 5000/50)", got)
	}
}

func TestSizing(t *testing.T) {
	for _, c := range []struct {
		name               string
		rate, micros, util float64
		wantCores          float64
		wantShards         int
	}{
		{"a million requests at 20 µs each need 20 cores, 29 shards at 70%", 1e6, 20, 0.7, 20, 29},
		{"exactly full shards need no extra one", 1e6, 7, 0.7, 7, 10},
		{"a light load still needs a shard", 1000, 1, 0.7, 0.001, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cores, shards := sizing(c.rate, c.micros, c.util)
			if math.Abs(cores-c.wantCores) > 1e-9 || shards != c.wantShards {
				t.Errorf("sizing = %v cores, %d shards; want %v, %d", cores, shards, c.wantCores, c.wantShards)
			}
		})
	}
	// 100 µs a lease of 50 at 70%: 7,000 leases a second, 350,000 requests.
	if got := hotKeyCeiling(100, 50, 0.7); math.Abs(got-350000) > 1e-6 {
		t.Errorf("hotKeyCeiling = %v, want 350000", got)
	}
}

// The scale run's gateway file passes the gateway's own checks, names the
// Cluster and has both routes.
func TestScaleGatewayConfigIsAValidClusterFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, pseudonymSecretFile), []byte(fakePseudonymSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dedup := range []bool{false, true} {
		src, err := scaleGatewayConfig("127.0.0.1:18080", "127.0.0.1:18081", "127.0.0.1:18082",
			[]string{"127.0.0.1:17001", "127.0.0.1:17002", "127.0.0.1:17003"}, dedup)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "scale.hcl")
		if _, diags := config.Parse(file, []byte(src), func(string) (string, bool) { return "", false }); diags.HasErrors() {
			t.Errorf("dedup %t: %s\n%s", dedup, diags.Error(), src)
		}
		for _, want := range []string{`mode       = "cluster"`, `"127.0.0.1:17001", "127.0.0.1:17002", "127.0.0.1:17003"`,
			`route "hot"`, `path     = "/hot"`, "lease     = 50", "access = false", `trusted_proxies = ["127.0.0.1/32"]`} {
			if !strings.Contains(src, want) {
				t.Errorf("dedup %t: the file has no %s:\n%s", dedup, want, src)
			}
		}
	}
}

func TestWrkRotationStartsWhereItIsTold(t *testing.T) {
	dir := t.TempDir()
	path, err := writeWrkRotation(dir, 100000, 212500)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "local i = 12500\n") || !strings.Contains(string(b), "local n = 100000\n") {
		t.Errorf("the rotation from 212500 of 100000 does not start at 12500:\n%s", b)
	}
}

func TestScaleModeSplitsSixtyFourConnectionsUnlessTold(t *testing.T) {
	for _, c := range []struct {
		args  []string
		conns []int
	}{
		{[]string{"-mode", "scale"}, []int{64}},
		{[]string{"-mode", "scale", "-conns", "16,256"}, []int{16, 256}},
		{nil, []int{64, 512}},
	} {
		s, err := parseSettings(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if !slices.Equal(s.conns, c.conns) {
			t.Errorf("%q: conns %v, want %v", c.args, s.conns, c.conns)
		}
	}
}

// The report's sizing rows are the medians of each route's rounds at each
// connection count; the first pass is a row of its own.
func TestScaleReportSizesEachPolicyFromItsMedians(t *testing.T) {
	h := &harness{s: settings{rounds: 3, duration: 5 * time.Second, conns: []int{64}}, pingMicros: map[int]float64{1: 14.5, 16: 1}}
	shards := []*shard{{first: 0, last: 8191}, {first: 8192, last: 16383}}
	cpu := func(micros float64, served int64) []float64 {
		total := micros * float64(served) / 1e6
		return []float64{total / 2, total / 2}
	}
	var phases []phase
	for round, micros := range []float64{60, 70, 90} {
		phases = append(phases,
			phase{round: round + 1, route: scaleRoutes[0], conns: 64, served: 10000, evalsha: []int64{5000, 5000},
				evalMicros: []int64{0, 0}, inScript: []int64{0, 0}, otherCalls: []int64{0, 0}, redisCPU: cpu(micros, 10000), wallSeconds: 5},
			phase{round: round + 1, route: scaleRoutes[1], conns: 64, served: 50000, evalsha: []int64{0, 1000},
				evalMicros: []int64{0, 0}, inScript: []int64{0, 0}, otherCalls: []int64{0, 0}, redisCPU: []float64{0, micros / 20 * 50000 / 1e6}, wallSeconds: 5})
	}
	phases = append(phases, phase{round: 0, route: exactNew, conns: 64, served: 10000, evalsha: []int64{5000, 5000},
		evalMicros: []int64{0, 0}, inScript: []int64{0, 0}, otherCalls: []int64{0, 0}, redisCPU: cpu(100, 10000), wallSeconds: 5})
	got := h.scaleReport(shards, phases, []int64{50000, 50001}, []string{"hmget"})
	for _, want := range []string{
		"| exact, each request its subject's first in the window (creates the key) | 64 | 100.00 | 100.0 | 100.00 | 143 |",
		"| exact (one decision a request), the subject's key in place | 64 | 70.00 | 70.0 | 70.00 | 100 |",
		"| leased (lease = 50) | 64 | 3.50 | 175.0 | 3.50 | 5 |",
		"up to 200,000 req/s",
		"| 2 | leased | 64 | 2 (8192–16383) | 100.0% |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report has no %q:\n%s", want, got)
		}
	}
}
