package proxy_test

import (
	"container/heap"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/redistest"
)

// redisBackend starts the Redis that a test's gateways share: the options
// of their limiters, and a client of each Redis server (for measureOffset
// and scriptCalls).
type redisBackend func(t *testing.T) (limiter.RedisOptions, []*redis.Client)

// standaloneRedis is a redisBackend on a standalone server of its own.
func standaloneRedis(t *testing.T) (limiter.RedisOptions, []*redis.Client) {
	s := redistest.Start(t)
	return limiter.RedisOptions{Addrs: []string{s.Addr}}, []*redis.Client{s.Client(t)}
}

// onCluster is a redisBackend on cluster, or on a Cluster of its own when
// cluster is nil.
func onCluster(cluster *redistest.Cluster) redisBackend {
	return func(t *testing.T) (limiter.RedisOptions, []*redis.Client) {
		c := cluster
		if c == nil {
			c = redistest.StartCluster(t)
		}
		var servers []*redis.Client
		for _, n := range c.Nodes {
			servers = append(servers, n.Client(t))
		}
		return limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: c.Addrs()}, servers
	}
}

// redisTopology is a Redis deployment the exactness checkers run on.
type redisTopology struct {
	name    string
	backend redisBackend
}

// standaloneAndCluster are a standalone Redis and a Cluster: cluster, or a
// Cluster of its own when cluster is nil.
func standaloneAndCluster(cluster *redistest.Cluster) []redisTopology {
	return []redisTopology{{"standalone Redis", standaloneRedis}, {"Redis Cluster", onCluster(cluster)}}
}

// decision is one request as a client saw it: when it was sent and when
// its answer came back, by the local clock, and what the answer was.
type decision struct {
	subject    string // the budget it spends: a principal, or the client address
	instance   int    // which gateway answered
	start, end time.Time
	status     int
	retryAfter string
	rls        bool // decided by the rate limit service, never forwarded
}

// clockOffset bounds Redis TIME minus the local clock: the true offset lies
// in [min, max].
type clockOffset struct{ min, max time.Duration }

// hull is the smallest offset that holds both o and p: an offset measured
// before and one measured after a run cover a clock that drifted between.
func (o clockOffset) hull(p clockOffset) clockOffset {
	return clockOffset{min(o.min, p.min), max(o.max, p.max)}
}

// failover is a span of local time during which the Redis that held the
// counters was replaced; the counters written just before may be lost.
type failover struct{ from, to time.Time }

// exactness is what a fixed window promises of a history of decisions.
//
// A fixed window decides by Redis TIME: window n holds the instants whose
// Unix milliseconds divided by the window are n. A request was decided at
// some instant between its start and end, so, through the offset bounds, it
// falls in a range of windows; a request whose range holds more than one
// window is ambiguous. Then, for each subject:
//
//   - Upper bound: the admitted (200) requests can be placed in windows of
//     their ranges so that none holds more than limit × (1 + failovers
//     touching it). Only 200s count: a 503 may have spent budget, which
//     leaves less for 200s, never more.
//   - Lower bound: a window in which a request was certainly denied (429)
//     had its limit spent, since a fixed window with cost 1 denies only
//     then (with leases of budget, all but earlyDenial of it: the units
//     the other gateways' leases may hold unused). So k such windows need limit × k distinct requests, each a 200
//     or a 503 (an unknown outcome counts as possibly admitted) that may lie
//     in one of them; checking every run of windows from one denying window
//     to another checks every set of them, as each request's windows are
//     consecutive.
//   - Every answer is 200, 429 or 503, and every 429 and 503 carries a
//     Retry-After of at least one second.
type exactness struct {
	limit     int
	window    time.Duration
	offset    clockOffset
	failovers []failover
	// denialSlack is how long past its window's end a gateway may still
	// answer with a denial it remembered (limiter.RedisOptions
	// DenialCacheEntries): a 429 is placed as if sent that much earlier.
	denialSlack time.Duration
	// earlyDenial is how much of the limit may be left unspent by admitted
	// requests when a window denies: with leases of budget (lease = N) on
	// I gateways, (I - 1) × (N - 1).
	earlyDenial int
}

// windowTally is what a history says of one subject's window.
type windowTally struct {
	subject       string
	index         int64 // Redis Unix milliseconds / window milliseconds
	admitted      int   // 200s certainly in this window
	maybeAdmitted int   // 200s that may be in it, the certain ones included
	unknown       int   // 503s that may be in it
	denied        int   // 429s certainly in it
	failovers     int
}

func (w windowTally) String() string {
	return fmt.Sprintf("window %d: %d admitted (%d possibly), %d denied, %d unknown, %d failovers",
		w.index, w.admitted, w.maybeAdmitted, w.denied, w.unknown, w.failovers)
}

func (e exactness) windowOf(t time.Time) int64 {
	return t.UnixMilli() / e.window.Milliseconds()
}

// span is the range of windows in which Redis may have placed a decision
// made between local instants from and to.
func (e exactness) span(from, to time.Time) (lo, hi int64) {
	return e.windowOf(from.Add(e.offset.min)), e.windowOf(to.Add(e.offset.max))
}

func (e exactness) failoversIn(w int64) int {
	n := 0
	for _, f := range e.failovers {
		if lo, hi := e.span(f.from, f.to); lo <= w && w <= hi {
			n++
		}
	}
	return n
}

func (e exactness) capacity(w int64) int {
	return e.limit * (1 + e.failoversIn(w))
}

// verify is check for a run of the real thing: each violation fails t,
// and the tallies are returned for the run's own figures.
func (e exactness) verify(t *testing.T, history []decision) []windowTally {
	t.Helper()
	tallies, violations := e.check(history)
	for _, v := range violations {
		t.Error(v)
	}
	return tallies
}

// check returns the tally of every subject's windows, ordered, and every
// way in which history breaks the promise; none means it keeps it.
func (e exactness) check(history []decision) (tallies []windowTally, violations []string) {
	type key struct {
		subject string
		index   int64
	}
	admitted := map[string][][2]int64{} // the 200s' window ranges
	spent := map[string][][2]int64{}    // the 200s' and 503s'
	windows := map[key]*windowTally{}
	tally := func(s string, w int64) *windowTally {
		k := key{s, w}
		if windows[k] == nil {
			windows[k] = &windowTally{subject: s, index: w, failovers: e.failoversIn(w)}
		}
		return windows[k]
	}
	for _, d := range history {
		switch d.status {
		case http.StatusOK:
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			if n, err := strconv.Atoi(d.retryAfter); err != nil || n < 1 {
				violations = append(violations, fmt.Sprintf("%s: a %d from gateway %d has Retry-After %q, want a whole number of seconds, at least 1",
					d.subject, d.status, d.instance, d.retryAfter))
			}
		default:
			violations = append(violations, fmt.Sprintf("%s: gateway %d answered %d, want only 200, 429 or 503", d.subject, d.instance, d.status))
			continue
		}
		from := d.start
		if d.status == http.StatusTooManyRequests {
			from = from.Add(-e.denialSlack)
		}
		lo, hi := e.span(from, d.end)
		for w := lo; w <= hi; w++ {
			t := tally(d.subject, w)
			switch d.status {
			case http.StatusOK:
				t.maybeAdmitted++
				if lo == hi {
					t.admitted++
				}
			case http.StatusServiceUnavailable:
				t.unknown++
			case http.StatusTooManyRequests:
				if lo == hi {
					t.denied++
				}
			}
		}
		if d.status == http.StatusOK {
			admitted[d.subject] = append(admitted[d.subject], [2]int64{lo, hi})
		}
		if d.status != http.StatusTooManyRequests {
			spent[d.subject] = append(spent[d.subject], [2]int64{lo, hi})
		}
	}
	for _, t := range windows {
		tallies = append(tallies, *t)
	}
	sort.Slice(tallies, func(i, j int) bool {
		if tallies[i].subject != tallies[j].subject {
			return tallies[i].subject < tallies[j].subject
		}
		return tallies[i].index < tallies[j].index
	})
	denying := map[string][]int64{}
	for _, t := range tallies {
		if t.denied > 0 {
			denying[t.subject] = append(denying[t.subject], t.index)
		}
	}
	subjects := make([]string, 0, len(windows))
	for _, t := range tallies {
		if len(subjects) == 0 || subjects[len(subjects)-1] != t.subject {
			subjects = append(subjects, t.subject)
		}
	}
	for _, s := range subjects {
		violations = append(violations, e.underSpent(s, denying[s], spent[s])...)
		violations = append(violations, e.overAdmitted(s, admitted[s])...)
	}
	return tallies, violations
}

// underSpent checks, for every run of windows from one denying window to
// another, that enough 200s and 503s may lie in it to have spent the limit
// of each denying window in it.
func (e exactness) underSpent(subject string, denying []int64, ranges [][2]int64) []string {
	var violations []string
	for i, first := range denying {
		for j, last := range denying[i:] {
			need, may := (e.limit-e.earlyDenial)*(j+1), 0
			for _, r := range ranges {
				if r[0] <= last && r[1] >= first {
					may++
				}
			}
			if may < need {
				violations = append(violations, fmt.Sprintf("%s: windows %d..%d: %d of them denied, so %d requests were spent in them, but at most %d 200s and 503s lie in them",
					subject, first, last, j+1, need, may))
			}
		}
	}
	return violations
}

// overAdmitted places the admitted requests, given as window ranges, into
// windows, earliest window first and, within a window, the request whose
// range ends first: if any placement keeps every window within its
// capacity, this one does. A request whose range ends before it finds room
// is a violation.
func (e exactness) overAdmitted(subject string, ranges [][2]int64) []string {
	sort.Slice(ranges, func(i, j int) bool { return ranges[i][0] < ranges[j][0] })
	var violations []string
	var waiting lastWindows
	for i, w := 0, int64(0); i < len(ranges) || waiting.Len() > 0; w++ {
		if waiting.Len() == 0 {
			w = ranges[i][0]
		}
		for ; i < len(ranges) && ranges[i][0] <= w; i++ {
			heap.Push(&waiting, ranges[i][1])
		}
		for room := e.capacity(w); room > 0 && waiting.Len() > 0; room-- {
			heap.Pop(&waiting)
		}
		over := 0
		for waiting.Len() > 0 && waiting[0] <= w {
			heap.Pop(&waiting)
			over++
		}
		if over > 0 {
			violations = append(violations, fmt.Sprintf("%s: window %d admitted %d more than its capacity %d allows (limit %d, %d failovers)",
				subject, w, over, e.capacity(w), e.limit, e.failoversIn(w)))
		}
	}
	return violations
}

// lastWindows is a min-heap of the last windows admitted requests may be in.
type lastWindows []int64

func (h lastWindows) Len() int           { return len(h) }
func (h lastWindows) Less(i, j int) bool { return h[i] < h[j] }
func (h lastWindows) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *lastWindows) Push(x any)        { *h = append(*h, x.(int64)) }
func (h *lastWindows) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// measureOffset bounds Redis TIME minus the local clock from a few TIME
// round trips to each server: on one server the bounds of every sample
// hold, so they intersect; servers may differ, so theirs are joined.
func measureOffset(t *testing.T, servers ...*redis.Client) clockOffset {
	t.Helper()
	var all clockOffset
	for i, c := range servers {
		one := clockOffset{min: -time.Hour, max: time.Hour}
		for range 5 {
			before := time.Now()
			now, err := c.Time(context.Background()).Result()
			after := time.Now()
			if err != nil {
				t.Fatalf("TIME: %v", err)
			}
			// TIME truncates to the microsecond.
			one.min = max(one.min, now.Sub(after))
			one.max = min(one.max, now.Add(time.Microsecond).Sub(before))
		}
		if i == 0 {
			all = one
		} else {
			all = all.hull(one)
		}
	}
	return all
}

// load is clients sending requests as fast as they can, each to one of the
// gateways and, when there are principals, as one of them, recording every
// decision, until finish.
type load struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	history []decision
	errs    []error
	// lastDecided is when the latest request that got a 200 or 429 was
	// sent, in Unix nanoseconds.
	lastDecided atomic.Int64
	// denials is, for each subject, when each of its 429s was sent.
	denials map[string][]time.Time
}

// principalHeader is the header newResolver trusts from a trusted proxy.
const principalHeader = "X-Auth-Principal"

func startLoad(t *testing.T, gateways []*gateway, clients int, principals []string) *load {
	t.Helper()
	return startLoadWith(t, gateways, clients, principals, httpSender(t))
}

// sender sends one request of client i, as principal subject (or from
// the client address 127.0.0.1, when asPrincipal is false), to g.
type sender func(t *testing.T, i int, g *gateway, asPrincipal bool, subject string) (decision, error)

// httpSender is a sender over HTTP, its connections kept for every call
// until t ends.
func httpSender(t *testing.T) sender {
	transport := &http.Transport{MaxIdleConnsPerHost: 256}
	t.Cleanup(transport.CloseIdleConnections)
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	return func(_ *testing.T, _ int, g *gateway, asPrincipal bool, subject string) (decision, error) {
		return send(client, g.URL, asPrincipal, subject)
	}
}

// startLoadWith is startLoad with each request sent by send.
func startLoadWith(t *testing.T, gateways []*gateway, clients int, principals []string, send sender) *load {
	t.Helper()
	l := &load{stop: make(chan struct{}), denials: map[string][]time.Time{}}
	for i := range clients {
		instance := i % len(gateways)
		subject := "127.0.0.1"
		if len(principals) > 0 {
			subject = principals[i%len(principals)]
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			var mine []decision
			var err error
			for !l.stopped() {
				var d decision
				if d, err = send(t, i, gateways[instance], len(principals) > 0, subject); err != nil {
					break
				}
				d.instance = instance
				mine = append(mine, d)
				if d.status == http.StatusTooManyRequests {
					l.mu.Lock()
					l.denials[subject] = append(l.denials[subject], d.start)
					l.mu.Unlock()
				}
				if d.status == http.StatusOK || d.status == http.StatusTooManyRequests {
					for sent := d.start.UnixNano(); ; {
						last := l.lastDecided.Load()
						if last >= sent || l.lastDecided.CompareAndSwap(last, sent) {
							break
						}
					}
				}
			}
			l.mu.Lock()
			l.history = append(l.history, mine...)
			if err != nil {
				l.errs = append(l.errs, err)
			}
			l.mu.Unlock()
		}()
	}
	return l
}

func (l *load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// finish stops sending, waits for the answers in flight and returns every
// decision.
func (l *load) finish(t *testing.T) []decision {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	for _, err := range l.errs {
		t.Error(err)
	}
	return l.history
}

// firstDeniedAfter is when the first request of subject sent after t that
// got a 429 was sent; false if none yet.
func (l *load) firstDeniedAfter(subject string, t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, at := range l.denials[subject] {
		if at.After(t) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// decidedSince reports whether a request sent after t got a 200 or 429.
func (l *load) decidedSince(t time.Time) bool {
	return l.lastDecided.Load() > t.UnixNano()
}

func send(client *http.Client, base string, asPrincipal bool, subject string) (decision, error) {
	req, err := http.NewRequest("GET", base+"/orders", nil)
	if err != nil {
		return decision{}, err
	}
	if asPrincipal {
		req.Header.Set(principalHeader, subject)
	}
	d := decision{subject: subject, start: time.Now()}
	res, err := client.Do(req)
	if err != nil {
		return decision{}, err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	d.end = time.Now()
	if err != nil {
		return decision{}, err
	}
	d.status, d.retryAfter = res.StatusCode, res.Header.Get("Retry-After")
	return d, nil
}

// statusCounts counts a history's answers by status.
func statusCounts(history []decision) map[int]int {
	n := map[int]int{}
	for _, d := range history {
		n[d.status]++
	}
	return n
}

// wantViolation holds a checker's verdict on a made-up history: no
// violation where want is empty, else one that contains want. tallies are
// shown on a failure.
func wantViolation(t *testing.T, violations []string, want string, tallies any) {
	t.Helper()
	found := false
	for _, v := range violations {
		found = found || (want != "" && strings.Contains(v, want))
	}
	switch {
	case want == "" && len(violations) > 0:
		t.Fatalf("violations %q in a good history; tallies %v", violations, tallies)
	case want != "" && !found:
		t.Fatalf("violations %q, want one with %q; tallies %v", violations, want, tallies)
	}
}

// statusCounter counts answers by status, from many clients at once.
type statusCounter struct {
	mu sync.Mutex
	n  map[int]int
}

// send sends req with client, reads the answer's body and counts its
// status, which it returns; a failure to send is the test's error, and 0.
func (c *statusCounter) send(t *testing.T, client *http.Client, req *http.Request) int {
	res, err := client.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[int]int{}
	}
	c.n[res.StatusCode]++
	return res.StatusCode
}

// counts is how many answers of each status came so far.
func (c *statusCounter) counts() map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := make(map[int]int, len(c.n))
	for status, k := range c.n {
		n[status] = k
	}
	return n
}

// span is when the first request of history was sent and when the last
// answer came.
func span(history []decision) (first, last time.Time) {
	for _, d := range history {
		if first.IsZero() || d.start.Before(first) {
			first = d.start
		}
		if d.end.After(last) {
			last = d.end
		}
	}
	return first, last
}
