package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
)

// TestExactnessCheckerCatchesBadHistories feeds the checker made-up
// histories, so that a passing run of the real ones means something.
func TestExactnessCheckerCatchesBadHistories(t *testing.T) {
	// A window boundary of a 1s window, so ms(n) lies in window n/1000.
	origin := time.Unix(1_800_000_000, 0)
	ms := func(n int) time.Time { return origin.Add(time.Duration(n) * time.Millisecond) }
	req := func(status, fromMillis, toMillis int) decision {
		d := decision{subject: "a", start: ms(fromMillis), end: ms(toMillis), status: status}
		if status != http.StatusOK {
			d.retryAfter = "1"
		}
		return d
	}
	times := func(n int, d decision) []decision {
		var h []decision
		for range n {
			h = append(h, d)
		}
		return h
	}
	join := func(parts ...[]decision) []decision {
		var h []decision
		for _, p := range parts {
			h = append(h, p...)
		}
		return h
	}
	cases := []struct {
		name      string
		limit     int
		offset    clockOffset
		failovers []failover
		slack     time.Duration
		early     int
		history   []decision
		violation string // a substring of one violation; empty: none
	}{
		{
			name:  "the limit admitted in each window and the rest denied passes",
			limit: 3,
			history: join(times(3, req(200, 10, 20)), times(5, req(429, 30, 40)),
				times(3, req(200, 1010, 1020)), times(5, req(429, 1030, 1040))),
		},
		{
			name:      "one admission over the limit fails",
			limit:     3,
			history:   join(times(4, req(200, 10, 20)), times(5, req(429, 30, 40))),
			violation: "window 1800000000 admitted 1 more than its capacity 3",
		},
		{
			name:  "an admission straddling two full windows fails",
			limit: 2,
			history: join(times(2, req(200, 10, 20)), times(2, req(200, 1010, 1020)),
				[]decision{req(200, 990, 1005)}),
			violation: "admitted 1 more",
		},
		{
			name:  "an admission straddling into a window with room passes",
			limit: 2,
			history: join(times(2, req(200, 10, 20)), times(1, req(200, 1010, 1020)),
				[]decision{req(200, 990, 1005)}),
		},
		{
			name:      "a denial before the limit was spent fails",
			limit:     3,
			history:   join(times(2, req(200, 10, 20)), times(1, req(429, 30, 40))),
			violation: "windows 1800000000..1800000000: 1 of them denied, so 3 requests were spent in them, but at most 2",
		},
		{
			name:  "two denying windows cannot both count one admission that straddles them",
			limit: 2,
			history: join(times(1, req(200, 10, 20)), times(1, req(429, 30, 40)),
				[]decision{req(200, 990, 1005)}, times(1, req(200, 1010, 1020)), times(1, req(429, 1030, 1040))),
			violation: "windows 1800000000..1800000001: 2 of them denied, so 4 requests were spent in them, but at most 3",
		},
		{
			name:    "with leases, a denial may come before the limit by what the other gateways hold",
			limit:   10,
			early:   3,
			history: join(times(7, req(200, 10, 20)), times(2, req(429, 30, 40))),
		},
		{
			name:      "with leases, a denial earlier than that fails",
			limit:     10,
			early:     3,
			history:   join(times(6, req(200, 10, 20)), times(2, req(429, 30, 40))),
			violation: "1 of them denied, so 7 requests were spent in them, but at most 6",
		},
		{
			name:    "a 503 counts as possibly admitted",
			limit:   3,
			history: join(times(2, req(200, 10, 20)), times(1, req(503, 20, 25)), times(1, req(429, 30, 40))),
		},
		{
			name:      "a 503 does not excuse an admission over the limit",
			limit:     2,
			history:   join(times(3, req(200, 10, 20)), times(1, req(503, 20, 25))),
			violation: "admitted 1 more than its capacity 2",
		},
		{
			name:      "a failover in the window doubles its bound",
			limit:     2,
			failovers: []failover{{ms(300), ms(400)}},
			history:   join(times(4, req(200, 10, 20)), times(1, req(429, 30, 40))),
		},
		{
			name:      "more than twice the limit across one failover fails",
			limit:     2,
			failovers: []failover{{ms(300), ms(400)}},
			history:   times(5, req(200, 10, 20)),
			violation: "admitted 1 more than its capacity 4 allows (limit 2, 1 failovers)",
		},
		{
			name:      "a failover in another window does not raise this one's bound",
			limit:     2,
			failovers: []failover{{ms(1300), ms(1400)}},
			history:   times(3, req(200, 10, 20)),
			violation: "capacity 2",
		},
		{
			name:    "Redis's clock ahead of the local one moves requests into the next window",
			limit:   2,
			offset:  clockOffset{500 * time.Millisecond, 500 * time.Millisecond},
			history: join(times(2, req(200, 100, 110)), times(2, req(200, 600, 610))),
		},
		{
			name:      "an uncertain offset cannot hide an admission over the limit",
			limit:     2,
			offset:    clockOffset{-10 * time.Millisecond, 10 * time.Millisecond},
			history:   join(times(2, req(200, 100, 110)), times(2, req(200, 995, 999)), times(2, req(200, 1500, 1510))),
			violation: "window 1800000001 admitted 2 more",
		},
		{
			name:  "a remembered denial just past the window's end may be the previous window's",
			limit: 2,
			slack: time.Millisecond,
			history: join(times(2, req(200, 10, 20)), times(1, req(429, 30, 40)),
				times(1, req(429, 1000, 1001)), times(1, req(200, 1010, 1020))),
		},
		{
			name:  "without the slack the same denial is the next window's, whose limit was not spent",
			limit: 2,
			history: join(times(2, req(200, 10, 20)), times(1, req(429, 30, 40)),
				times(1, req(429, 1000, 1001)), times(1, req(200, 1010, 1020))),
			violation: "windows 1800000001..1800000001: 1 of them denied",
		},
		{
			name:      "a status other than 200, 429 or 503 fails",
			limit:     2,
			history:   []decision{req(500, 10, 20)},
			violation: "answered 500",
		},
		{
			name:      "a 429 without Retry-After fails",
			limit:     1,
			history:   []decision{req(200, 10, 20), {subject: "a", start: ms(30), end: ms(40), status: 429}},
			violation: `Retry-After ""`,
		},
		{
			name:  "each subject has its own budget",
			limit: 2,
			history: join(times(2, req(200, 10, 20)),
				times(2, decision{subject: "b", start: ms(10), end: ms(20), status: 200})),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := exactness{limit: c.limit, window: time.Second, offset: c.offset, failovers: c.failovers, denialSlack: c.slack, earlyDenial: c.early}
			tallies, violations := e.check(c.history)
			wantViolation(t, violations, c.violation, tallies)
		})
	}
}

// rememberedDenialSlack is how long past its window a gateway's memory of a
// denial may last: none. The scripts reply in whole milliseconds of a
// truncated Redis TIME, so limiter/denials.go ends a remembered denial a
// millisecond before the retry time Redis gave; before it did, this checker
// caught a request just after a window boundary denied from memory while
// the new window's budget was unspent.
const rememberedDenialSlack = 0

// TestExactnessAcrossFourGatewaysSharingOneRedis: four gateways, each with
// its own limiter, share one Redis; 64 clients send as fast as they can for
// three seconds of 1s fixed windows. Every window admits no more than the
// limit, every window the clients covered from end to end with more
// decided requests than the limit denied (so admitted exactly the limit),
// and only the admitted reached the upstream.
func TestExactnessAcrossFourGatewaysSharingOneRedis(t *testing.T) {
	const (
		instances = 4
		clients   = 64
		// Ten a window: a busy machine's clients still meet it.
		limit  = 10
		window = time.Second
		run    = 3 * time.Second
	)
	cluster := redistest.StartCluster(t)
	principals := []string{"alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com", "erin@example.com"}
	cases := []struct {
		name       string
		backend    redisBackend
		principals []string
	}{
		{
			name:    "standalone Redis, one client address",
			backend: standaloneRedis,
		},
		{
			name:    "Redis Cluster, one client address",
			backend: onCluster(cluster),
		},
		{
			name:       "Redis Cluster, five principals from a trusted proxy",
			backend:    onCluster(cluster),
			principals: principals,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Side by side: the checker does not depend on how fast the
			// clients go, and the demand stays far above the limit.
			t.Parallel()
			opts, servers := c.backend(t)
			up := newUpstream(t)
			p := redisPolicy(limitertest.FixedWindow(limit, window), "exact-"+limitertest.Subject()[3:11])
			var trusted []string
			if len(c.principals) > 0 {
				trusted = []string{"127.0.0.1/32"}
			}
			var gateways []*gateway
			for range instances {
				gateways = append(gateways, newGateway(t, setup{
					routes:  []proxy.Route{route("orders.read", "/orders", up, t, p)},
					limiter: redistest.NewLimiter(t, opts),
					trusted: trusted,
				}))
			}

			exactRun(t, exactSpec{gateways: gateways, servers: servers, up: up, clients: clients, principals: c.principals,
				limit: limit, window: window, run: run, send: httpSender(t)})
		})
	}
}

// TestExactnessThroughASentinelFailover kills the master while 64 clients
// send to four gateways. Replication is asynchronous, so the promoted
// replica may have missed counts: a window the failover touched may admit
// up to twice the limit, never more, and none may deny before its limit,
// the 503s counted as possibly admitted, was spent.
func TestExactnessThroughASentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds")
	}
	const (
		instances = 4
		clients   = 64
		limit     = 25
		// One window for the whole run; the checker still places each
		// request by Redis's clock should the run straddle its end.
		window = time.Hour
	)
	sg := redistest.StartSentinel(t)
	up := newUpstream(t)
	p := redisPolicy(limitertest.FixedWindow(limit, window), "exact-"+limitertest.Subject()[3:11])
	var gateways []*gateway
	for range instances {
		gateways = append(gateways, newGateway(t, setup{
			routes: []proxy.Route{route("orders.read", "/orders", up, t, p)},
			// Without the denial cache every answer comes from Redis, so the
			// failover is seen, and the first answer after it shows that
			// Redis is back.
			limiter: redistest.NewLimiter(t, limiter.RedisOptions{Mode: limiter.RedisSentinel, Addrs: sg.SentinelAddrs(),
				MasterName: sg.MasterName, DenialCacheEntries: -1}),
		}))
	}
	master, replica := sg.Master.Client(t), sg.Replica.Client(t)
	waitForSync(t, master, replica)
	offset := measureOffset(t, master, replica)

	started := time.Now()
	l := startLoad(t, gateways, clients, nil)
	time.Sleep(time.Second)
	killing := time.Now()
	sg.Master.Kill()
	killed := time.Now()
	for !l.decidedSince(killed) {
		if time.Since(killed) > 20*time.Second {
			l.finish(t)
			t.Fatal("no decision within 20s of killing the master")
		}
		time.Sleep(20 * time.Millisecond)
	}
	recovered := time.Now()
	time.Sleep(time.Second)
	stopped := time.Now()
	history := l.finish(t)
	offset = offset.hull(measureOffset(t, replica))

	e := exactness{limit: limit, window: window, offset: offset, failovers: []failover{{killing, recovered}}}
	tallies := e.verify(t, history)
	n := statusCounts(history)
	if n[503] == 0 {
		t.Error("no 503 while the master was down: the failover went unseen")
	}
	if n[429] == 0 {
		t.Error("nothing denied: the limit was never reached")
	}
	if up.count() != n[200] {
		t.Errorf("the upstream saw %d requests, the clients %d 200s", up.count(), n[200])
	}
	t.Logf("%d requests in %v: %d admitted, %d denied (429), %d unknown (503); Redis answered again %v after the kill",
		len(history), stopped.Sub(started).Round(time.Millisecond), n[200], n[429], n[503], recovered.Sub(killing).Round(time.Millisecond))
	for _, tl := range tallies {
		t.Logf("%s %v", tl.subject, tl)
	}
}

// waitForSync waits until the replica has loaded the master's data and
// follows its writes, as a replica in service does. A fresh replica would
// otherwise wait out the diskless sync delay (5s) with nothing in it.
func waitForSync(t *testing.T, master, replica *redis.Client) {
	t.Helper()
	ctx := context.Background()
	if err := master.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := replica.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never synced: %v %s", err, info)
		}
	}
}
