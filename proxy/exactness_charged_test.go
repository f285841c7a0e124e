package proxy_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
)

// evaluation is one question a gateway put to its limiter, as a recorder
// in front of the limiter saw it: the call was made between from and to,
// by the local clock, so Redis ran its script in between.
type evaluation struct {
	subject  string // the pseudonym
	phase    limiter.Phase
	policies []string // by name, in the request's order
	cost     int64
	// decided: Redis decided (an Evaluated outcome, not the instance's
	// fallback); otherwise the script may or may not have run.
	decided  bool
	admitted bool   // every policy allowed (an admission's)
	allowed  []bool // each policy's own decision, by position
	from, to time.Time
}

// recordingLimiter records every evaluation the gateway asks of the
// limiter it wraps.
type recordingLimiter struct {
	proxy.Limiter
	mu    sync.Mutex
	evals []evaluation
}

func (r *recordingLimiter) Evaluate(ctx context.Context, req limiter.Request) limiter.Outcome {
	from := time.Now()
	o := r.Limiter.Evaluate(ctx, req)
	e := evaluation{subject: req.Subject, phase: req.Phase, cost: req.Cost, from: from, to: time.Now()}
	for _, p := range req.Policies.Policies() {
		e.policies = append(e.policies, p.Name)
	}
	if d, ok := o.(limiter.Evaluated); ok && !d.Fallback {
		e.decided, e.admitted = true, d.Allowed
		for i := range req.Policies.Len() {
			e.allowed = append(e.allowed, d.PolicyDecision(i).Allowed)
		}
	}
	r.mu.Lock()
	r.evals = append(r.evals, e)
	r.mu.Unlock()
	return o
}

func (r *recordingLimiter) history() []evaluation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]evaluation(nil), r.evals...)
}

// budget is a fixed-window policy of a route, as the checker needs it.
type budget struct {
	limit int64
	// maxCharge is, for a policy charged by the response, the most one
	// response may cost (1 for count_statuses, max_cost for cost_header);
	// 0 for a policy charged when the request is admitted.
	maxCharge int64
	// reserve is what an admission of a response-charged policy charges
	// until its settlement replaces it (limiter.Policy.Reserve).
	reserve int64
}

// chargedExactness is what fixed windows promise of the evaluations of a
// route whose policies mix request-counted ones and ones charged by the
// response, every request costing 1. A policy's charges in a window are,
// for a request-counted policy, the admissions (every policy allowed) and,
// for a response-charged one, the reserves of its admissions and its
// settlements, each of which replaces its admission's reserve: certainly
// the cost beyond the reserve, possibly the whole cost, in its window,
// and the reserve possibly in the admission's. An admission checks every
// policy against the charges of its window so far:
//
//   - A policy allows an admission only while its window's charges are at
//     most limit − 1 (a response-charged one needs its reserve of 1 left).
//     So an admission certainly in window w that a policy allowed
//     after charges certainly in w totalling limit or more had returned
//     breaks the promise.
//   - A policy denies only once its window's charges reach the limit. So
//     a denial certainly in w needs charges of at least limit that may lie
//     in w and may have been made before it; a charge whose outcome is
//     unknown (a 503, the fallback) counts as possibly made.
//   - Totals: a request-counted policy's window holds at most limit
//     charges. A response-charged one's may go past it, a debt: the charge
//     that reached the limit found at most limit − 1, and after it no
//     request is admitted in the window, so only the requests in flight
//     then (admitted, not yet charged) are still charged, each at most
//     maxCharge. With at most inFlight of a subject's requests in flight at
//     once, a window holds at most limit − 1 + inFlight × maxCharge.
//
// A charge is placed as exactness places a decision: in the windows its
// call's span may fall in through the clock offset; one that may lie in
// two is certain in neither. Calls that one returned before the other
// began ran in that order in Redis.
type chargedExactness struct {
	window   time.Duration
	offset   clockOffset
	budgets  map[string]budget // by policy name
	inFlight int64
}

// chargedTally is what the evaluations say of one subject's window of one
// policy.
type chargedTally struct {
	subject, policy  string
	index            int64
	admitted, denied int   // the policy's decisions certainly in the window
	charged          int64 // charges certainly in it
	maybeCharged     int64 // charges that may be in it, the certain ones included
}

func (t chargedTally) String() string {
	return fmt.Sprintf("%s window %d: %d allowed, %d denied, %d charged (%d possibly)",
		t.policy, t.index, t.admitted, t.denied, t.charged, t.maybeCharged)
}

// placedCharge is one charge of a policy, placed in windows lo..hi: at
// most cost, and at least sure (0 when it may not have been made).
type placedCharge struct {
	cost, sure int64
	from, to   time.Time
	lo, hi     int64
}

func (e chargedExactness) check(history []evaluation) (tallies []chargedTally, violations []string) {
	x := exactness{window: e.window, offset: e.offset}
	type key struct{ subject, policy string }
	charges := map[key][]placedCharge{}
	for _, ev := range history {
		lo, hi := x.span(ev.from, ev.to)
		if ev.phase == limiter.Settlement {
			// It replaces its admission's reserve: its own window certainly
			// gets what the cost is beyond the reserve (the rest, when the
			// admission's window is the same), and possibly all of it.
			k := key{ev.subject, ev.policies[0]}
			sure := int64(0)
			if ev.decided {
				sure = max(ev.cost-e.budgets[ev.policies[0]].reserve, 0)
			}
			charges[k] = append(charges[k], placedCharge{ev.cost, sure, ev.from, ev.to, lo, hi})
			continue
		}
		if ev.decided && !ev.admitted {
			continue
		}
		for i, name := range ev.policies {
			k, b := key{ev.subject, name}, e.budgets[name]
			switch {
			case b.maxCharge == 0:
				sure := int64(0)
				if ev.decided {
					sure = ev.cost
				}
				charges[k] = append(charges[k], placedCharge{ev.cost, sure, ev.from, ev.to, lo, hi})
			case !ev.decided || ev.allowed[i]:
				// The reserve, possibly still charged in its window.
				charges[k] = append(charges[k], placedCharge{b.reserve, 0, ev.from, ev.to, lo, hi})
			}
		}
	}
	type windowKey struct {
		key
		index int64
	}
	windows := map[windowKey]*chargedTally{}
	tally := func(k key, w int64) *chargedTally {
		wk := windowKey{k, w}
		if windows[wk] == nil {
			windows[wk] = &chargedTally{subject: k.subject, policy: k.policy, index: w}
		}
		return windows[wk]
	}
	for k, cs := range charges {
		for _, c := range cs {
			for w := c.lo; w <= c.hi; w++ {
				t := tally(k, w)
				t.maybeCharged += c.cost
				if c.lo == c.hi {
					t.charged += c.sure
				}
			}
		}
	}
	for _, ev := range history {
		if ev.phase != limiter.Admission || !ev.decided {
			continue
		}
		lo, hi := x.span(ev.from, ev.to)
		if lo != hi {
			continue
		}
		for i, name := range ev.policies {
			k, limit := key{ev.subject, name}, e.budgets[name].limit
			t := tally(k, lo)
			if ev.allowed[i] {
				t.admitted++
				var before int64
				for _, c := range charges[k] {
					if c.lo == lo && c.hi == lo && c.to.Before(ev.from) {
						before += c.sure
					}
				}
				if before > limit-ev.cost {
					violations = append(violations, fmt.Sprintf("%s %s: allowed in window %d after %d had been charged in it (limit %d)",
						ev.subject, name, lo, before, limit))
				}
				continue
			}
			t.denied++
			var mayBefore int64
			for _, c := range charges[k] {
				if c.lo <= lo && lo <= c.hi && c.from.Before(ev.to) {
					mayBefore += c.cost
				}
			}
			if mayBefore+ev.cost <= limit {
				violations = append(violations, fmt.Sprintf("%s %s: denied in window %d when at most %d had been charged in it (limit %d)",
					ev.subject, name, lo, mayBefore, limit))
			}
		}
	}
	for _, t := range windows {
		tallies = append(tallies, *t)
		b := e.budgets[t.policy]
		bound := b.limit
		if b.maxCharge > 0 {
			bound = b.limit - 1 + e.inFlight*b.maxCharge
		}
		if t.charged > bound {
			violations = append(violations, fmt.Sprintf("%s %s: window %d charged %d, more than its bound %d (limit %d)",
				t.subject, t.policy, t.index, t.charged, bound, b.limit))
		}
	}
	sort.Slice(tallies, func(i, j int) bool {
		a, b := tallies[i], tallies[j]
		if a.subject != b.subject {
			return a.subject < b.subject
		}
		if a.policy != b.policy {
			return a.policy < b.policy
		}
		return a.index < b.index
	})
	return tallies, violations
}

// TestChargedExactnessCheckerCatchesBadHistories feeds the checker
// made-up histories, so that a passing run of the real ones means
// something.
func TestChargedExactnessCheckerCatchesBadHistories(t *testing.T) {
	origin := time.Unix(1_800_000_000, 0) // a boundary of 1s windows
	ms := func(n int) time.Time { return origin.Add(time.Duration(n) * time.Millisecond) }
	admit := func(at int, allowed ...bool) evaluation {
		// calls, then failures
		e := evaluation{subject: "a", phase: limiter.Admission, policies: []string{"calls", "failures"}, cost: 1,
			decided: true, admitted: true, allowed: allowed, from: ms(at), to: ms(at + 1)}
		for _, a := range allowed {
			e.admitted = e.admitted && a
		}
		return e
	}
	settle := func(at int, cost int64) evaluation {
		return evaluation{subject: "a", phase: limiter.Settlement, policies: []string{"failures"}, cost: cost,
			decided: true, admitted: true, allowed: []bool{true}, from: ms(at), to: ms(at + 1)}
	}
	unknown := func(e evaluation) evaluation {
		e.decided, e.admitted, e.allowed = false, false, nil
		return e
	}
	// failures allows 3 a window and a response may cost up to 5; calls
	// admits 4 a window; a subject has at most 2 requests in flight.
	cases := []struct {
		name      string
		history   []evaluation
		violation string // a substring of one violation; empty: none
	}{
		{
			name: "admissions until the charges reach the limit, then denials, pass",
			history: []evaluation{admit(0, true, true), settle(10, 1), admit(20, true, true), settle(30, 1),
				admit(40, true, true), settle(50, 1), admit(60, true, false)},
		},
		{
			name:      "an admission after the charges reached the limit fails",
			history:   []evaluation{admit(0, true, true), settle(10, 3), admit(20, true, true)},
			violation: "failures: allowed in window 1800000000 after 3 had been charged in it",
		},
		{
			name:      "a denial before the limit was charged fails",
			history:   []evaluation{admit(0, true, true), settle(10, 2), admit(20, true, false)},
			violation: "failures: denied in window 1800000000 when at most 2 had been charged in it",
		},
		{
			name:    "a charge whose outcome is unknown may have been made",
			history: []evaluation{admit(0, true, true), settle(10, 2), unknown(settle(15, 1)), admit(20, true, false)},
		},
		{
			name:    "a charge that may lie in the previous window may have brought this one to the limit",
			history: []evaluation{admit(990, true, true), {subject: "a", phase: limiter.Settlement, policies: []string{"failures"}, cost: 3, decided: true, from: ms(995), to: ms(1005)}, admit(1010, true, false)},
		},
		{
			name: "the next window starts afresh",
			history: []evaluation{admit(0, true, true), settle(10, 3), admit(20, true, false),
				admit(1000, true, true), settle(1010, 1)},
		},
		{
			name:    "a debt of the requests in flight passes",
			history: []evaluation{admit(0, true, true), admit(1, true, true), settle(10, 5), settle(11, 5), admit(20, true, false)},
		},
		{
			name:      "a debt past what the requests in flight may cost fails",
			history:   []evaluation{admit(0, true, true), settle(10, 3), settle(11, 5), settle(12, 5)},
			violation: "failures: window 1800000000 charged 13, more than its bound 12",
		},
		{
			name:      "a request-counted policy admitting past its limit fails",
			history:   []evaluation{admit(0, true, true), admit(10, true, true), admit(20, true, true), admit(30, true, true), admit(40, true, true)},
			violation: "calls: allowed in window 1800000000 after 4 had been charged in it",
		},
		{
			name:    "a request-counted policy is not charged when another policy denies",
			history: []evaluation{admit(0, true, true), admit(10, true, true), admit(20, true, true), settle(25, 3), admit(30, true, false), admit(40, true, false)},
		},
		{
			name:      "a request-counted policy's denial needs its limit spent",
			history:   []evaluation{admit(0, true, true), admit(10, false, true)},
			violation: "calls: denied in window 1800000000 when at most 1 had been charged in it (limit 4)",
		},
		{
			name:    "a request-counted policy's admission whose outcome is unknown may have charged it",
			history: []evaluation{admit(0, true, true), admit(10, true, true), unknown(admit(15)), unknown(admit(16)), admit(20, false, true)},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := chargedExactness{window: time.Second, inFlight: 2,
				budgets: map[string]budget{"calls": {limit: 4}, "failures": {limit: 3, maxCharge: 5}}}
			tallies, violations := e.check(c.history)
			wantViolation(t, violations, c.violation, tallies)
		})
	}
}

// TestChargedExactnessAcrossThreeGatewaysSharingRedis: three gateways,
// each with its own limiter, share one Redis (standalone, then Cluster);
// 24 clients, as three principals, send as fast as they can to a route of
// three 1s fixed windows: "calls" (30 requests), "failures" (5 responses
// whose status is 401 or 403) and "usage" (60, as the upstream's cost
// header says, at most 20 a response). The upstream answers each
// principal its own mix, so that each policy is the one spent first for
// one of them: alice fails half her logins, bob's calls cost 0 to 999
// or carry a malformed or no cost, carol's are free. The checker holds
// every admission and denial to the window's charges, and each window's
// charges to its bound; the limiter was charged what the upstream said.
func TestChargedExactnessAcrossThreeGatewaysSharingRedis(t *testing.T) {
	const (
		instances = 3
		clients   = 24
		window    = time.Second
		run       = 3 * time.Second
	)
	principals := []string{"alice@example.com", "bob@example.com", "carol@example.com"}
	budgets := map[string]budget{"calls": {limit: 30}, "failures": {limit: 5, maxCharge: 1, reserve: 1}, "usage": {limit: 60, maxCharge: 20, reserve: 1}}
	for _, c := range standaloneAndCluster(redistest.StartCluster(t)) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts, servers := c.backend(t)
			// What the upstream said each response costs, by policy.
			var said sync.Map
			add := func(policy string, n int64) {
				v, _ := said.LoadOrStore(policy, new(atomic.Int64))
				v.(*atomic.Int64).Add(n)
			}
			var n atomic.Int64
			up, reached := answering(t, func(w http.ResponseWriter, r *http.Request) {
				i := n.Add(1)
				switch r.Header.Get(principalHeader) {
				case "alice@example.com":
					w.Header().Set("X-Usage-Cost", "1")
					add("usage", 1)
					if i%2 == 0 {
						add("failures", 1)
						w.WriteHeader([]int{401, 403}[i/2%2])
					}
				case "bob@example.com":
					costs := []string{"7", "20", "999", "x", "", "0", "13"}
					charged := []int64{7, 20, 20, 1, 1, 0, 13}
					if cost := costs[i%7]; cost != "" {
						w.Header().Set("X-Usage-Cost", cost)
					}
					add("usage", charged[i%7])
					if i%5 == 0 {
						w.WriteHeader(http.StatusInternalServerError)
					}
				default:
					w.Header().Set("X-Usage-Cost", "0")
				}
				w.Write([]byte("ok"))
			})
			suffix := "-" + limitertest.Subject()[3:11]
			calls := redisPolicy(limitertest.FixedWindow(budgets["calls"].limit, window), "calls"+suffix)
			failures := redisPolicy(limitertest.FixedWindow(budgets["failures"].limit, window), "failures"+suffix)
			failures.CountStatuses = limiter.StatusSet(401, 403)
			usage := redisPolicy(limitertest.FixedWindow(budgets["usage"].limit, window), "usage"+suffix)
			usage.CostHeader, usage.MaxCost = "X-Usage-Cost", budgets["usage"].maxCharge
			named := map[string]budget{}
			for _, p := range []*limiter.Policy{calls, failures, usage} {
				named[p.Name] = budgets[strings.TrimSuffix(p.Name, suffix)]
			}
			var recorders []*recordingLimiter
			var gateways []*gateway
			for range instances {
				rec := &recordingLimiter{Limiter: redistest.NewLimiter(t, opts)}
				recorders = append(recorders, rec)
				gateways = append(gateways, newGateway(t, setup{
					routes:  []proxy.Route{multiRoute("orders.read", "/orders", up, t, calls, failures, usage)},
					limiter: rec,
					trusted: []string{"127.0.0.1/32"},
				}))
			}

			offset := measureOffset(t, servers...)
			started := time.Now()
			l := startLoad(t, gateways, clients, principals)
			time.Sleep(run)
			// On a busy machine the run goes on (up to 15s more) until each
			// principal was denied in a window that began after the start.
			for until := time.Now().Add(15 * time.Second); time.Now().Before(until); time.Sleep(50 * time.Millisecond) {
				met := true
				for _, s := range principals {
					at, ok := l.firstDeniedAfter(s, started.Add(window+offset.max-offset.min))
					met = met && ok && time.Since(at) > window
				}
				if met {
					break
				}
			}
			clientHistory := l.finish(t)
			offset = offset.hull(measureOffset(t, servers...))
			var history []evaluation
			for _, rec := range recorders {
				history = append(history, rec.history()...)
			}

			e := chargedExactness{window: window, offset: offset, budgets: named, inFlight: clients / int64(len(principals))}
			tallies, violations := e.check(history)
			for i, v := range violations {
				if i == 20 {
					t.Errorf("and %d more", len(violations)-i)
					break
				}
				t.Error(v)
			}
			for _, ev := range history {
				if ev.phase == limiter.Admission && len(ev.policies) != len(named) {
					t.Errorf("an admission asked about %v, not every policy of the route", ev.policies)
					break
				}
			}

			// What the clients saw, against what the limiter said.
			statusesSeen := statusCounts(clientHistory)
			// A charge Redis did not answer in time is the gateway's charge
			// all the same (the checker counts it as possibly made).
			var admitted, denied, undecided, undecidedCharges int
			charged := map[string]int64{}
			for _, ev := range history {
				switch {
				case ev.phase == limiter.Settlement:
					charged[strings.TrimSuffix(ev.policies[0], suffix)] += ev.cost
					if !ev.decided {
						undecidedCharges++
					}
				case !ev.decided:
					undecided++
				case ev.admitted:
					admitted++
				default:
					denied++
				}
			}
			if got := int(reached.Load()); got != admitted {
				t.Errorf("the upstream saw %d requests, the limiter admitted %d", got, admitted)
			}
			if statusesSeen[429] != denied || statusesSeen[503] != undecided {
				t.Errorf("the clients got %d 429s and %d 503s; the limiter denied %d and failed to decide %d", statusesSeen[429], statusesSeen[503], denied, undecided)
			}
			for _, policy := range []string{"failures", "usage"} {
				v, _ := said.LoadOrStore(policy, new(atomic.Int64))
				if want := v.(*atomic.Int64).Load(); charged[policy] != want {
					t.Errorf("%s: the limiter was charged %d, the upstream's responses said %d", policy, charged[policy], want)
				}
			}
			for status, n := range statusesSeen {
				switch status {
				case 200, 401, 403, 500, 429, 503:
				default:
					t.Errorf("%d answers of %d", n, status)
				}
			}
			for _, d := range clientHistory {
				if d.status == 429 || d.status == 503 {
					if n, err := strconv.Atoi(d.retryAfter); err != nil || n < 1 {
						t.Errorf("a %d with Retry-After %q", d.status, d.retryAfter)
						break
					}
				}
			}

			// The run proved something: each policy denied (each is spent
			// first by one principal).
			deniedBy := map[string]int{}
			for _, ev := range history {
				if ev.phase == limiter.Admission && ev.decided {
					for i, name := range ev.policies {
						if !ev.allowed[i] {
							deniedBy[strings.TrimSuffix(name, suffix)]++
						}
					}
				}
			}
			for name := range budgets {
				if deniedBy[name] == 0 {
					t.Errorf("%s never denied: the clients never spent it", name)
				}
			}
			debts := map[string]int64{}
			for _, tl := range tallies {
				name := strings.TrimSuffix(tl.policy, suffix)
				debts[name] = max(debts[name], tl.charged-budgets[name].limit)
			}
			t.Logf("%d requests: %v by status; %d admitted, %d denied, %d undecided; charged %v (%d charges undecided); clock offset [%v, %v]; largest debt in a window %v",
				len(clientHistory), statusesSeen, admitted, denied, undecided, charged, undecidedCharges, offset.min, offset.max, debts)
			for _, tl := range tallies {
				t.Logf("%s %v", tl.subject[:11], tl)
			}
		})
	}
}
