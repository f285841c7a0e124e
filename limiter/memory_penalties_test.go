package limiter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter"
)

// fillPenalties imposes limiter.MaxPenalties penalties on route, each of
// a subject of its own, from now until until.
func fillPenalties(t *testing.T, pens limiter.Penalties, route string, now, until time.Time) {
	t.Helper()
	for i := range limiter.MaxPenalties {
		p := limiter.Penalty{Route: route, Policy: "p", Pseudonym: "v1:filler-" + strconv.Itoa(i), Start: now, Until: until}
		if err := pens.Impose(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
}

// A book full of one route's penalties, of subjects a client picked
// (header:, cookie:, query: sources) over a policy with the longest
// penalty, still holds another route's offender: the full route gives up
// the penalty that ends soonest.
func TestPenaltyBookFullHoldsAnotherRoutesOffender(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := limiter.NewMemory(limiter.MemoryOptions{Registerer: reg})
	t.Cleanup(func() { m.Close() })
	pens := m.Penalties()
	now := time.Now()
	fillPenalties(t, pens, "cheap", now, now.Add(limiter.MaxPenalty))
	offender := limiter.Penalty{Route: "login", Policy: "failed-logins", Pseudonym: "v1:credential-stuffer", Start: now, Until: now.Add(10 * time.Minute)}
	if err := pens.Impose(context.Background(), offender); err != nil {
		t.Fatal(err)
	}
	if _, ok := pens.Find("login", offender.Pseudonym, time.Now()); !ok {
		t.Fatal("another route's offender is not held: the book is full of one route's subjects")
	}
	if got := len(pens.List("cheap", time.Now())); got != limiter.MaxPenalties-1 {
		t.Fatalf("the full route holds %d penalties, want %d", got, limiter.MaxPenalties-1)
	}
	if n := labeled(t, reg, "gateway_limiter_penalty_evictions_total", "result", "evicted"); n != 1 {
		t.Fatalf("gateway_limiter_penalty_evictions_total{result=\"evicted\"} says %v, want 1", n)
	}
}

// On the route that fills the book, the next offender takes the place of
// the penalty that ends soonest when it ends later; one that ends no
// later than any held is refused. Each is counted.
func TestPenaltyBookFullGivesTheRoutesNextOffenderThePlaceThatEndsSoonest(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := limiter.NewMemory(limiter.MemoryOptions{Registerer: reg})
	t.Cleanup(func() { m.Close() })
	pens := m.Penalties()
	ctx := context.Background()
	now := time.Now()
	soonest := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:soonest", Start: now, Until: now.Add(time.Minute)}
	if err := pens.Impose(ctx, soonest); err != nil {
		t.Fatal(err)
	}
	for i := range limiter.MaxPenalties - 1 {
		p := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:filler-" + strconv.Itoa(i), Start: now, Until: now.Add(time.Hour)}
		if err := pens.Impose(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	next := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:next", Start: now.Add(time.Second), Until: now.Add(time.Second + time.Hour)}
	if err := pens.Impose(ctx, next); err != nil {
		t.Fatal(err)
	}
	if _, ok := pens.Find("r", next.Pseudonym, time.Now()); !ok {
		t.Fatal("the next offender is not held")
	}
	if _, ok := pens.Find("r", soonest.Pseudonym, time.Now()); ok {
		t.Fatal("the penalty that ends soonest is still held")
	}
	shorter := limiter.Penalty{Route: "r", Policy: "p", Pseudonym: "v1:shorter", Start: now, Until: now.Add(time.Minute)}
	if err := pens.Impose(ctx, shorter); err != nil {
		t.Fatal(err)
	}
	if _, ok := pens.Find("r", shorter.Pseudonym, time.Now()); ok {
		t.Fatal("a penalty that ends before every one held took a place")
	}
	if got := len(pens.List("r", time.Now())); got != limiter.MaxPenalties {
		t.Fatalf("%d penalties held, want %d", got, limiter.MaxPenalties)
	}
	for result, want := range map[string]float64{"evicted": 1, "refused": 1} {
		if n := labeled(t, reg, "gateway_limiter_penalty_evictions_total", "result", result); n != want {
			t.Fatalf("gateway_limiter_penalty_evictions_total{result=%q} says %v, want %v", result, n, want)
		}
	}
}

// Full, the book is shared evenly by the routes with penalties: a route's
// flood takes room from the routes that hold more than it, down to equal
// shares, and never from one that holds no more than an even share.
func TestPenaltyBookFullIsSharedEvenlyByRoutes(t *testing.T) {
	m := limiter.NewMemory(limiter.MemoryOptions{})
	t.Cleanup(func() { m.Close() })
	pens := m.Penalties()
	ctx := context.Background()
	now := time.Now()
	flood := func(route string, n int) {
		t.Helper()
		for i := range n {
			p := limiter.Penalty{Route: route, Policy: "p", Pseudonym: "v1:" + route + "-" + strconv.Itoa(i), Start: now, Until: now.Add(limiter.MaxPenalty)}
			if err := pens.Impose(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	held := func(route string) int { return len(pens.List(route, time.Now())) }
	const third = limiter.MaxPenalties / 3

	flood("login", 10)
	flood("a", limiter.MaxPenalties)
	if held("login") != 10 || held("a") != limiter.MaxPenalties-10 {
		t.Fatalf("login %d, a %d: want 10 and the rest", held("login"), held("a"))
	}
	flood("b", limiter.MaxPenalties)
	if want := (limiter.MaxPenalties - 10) / 2; held("a") != want || held("b") != want || held("login") != 10 {
		t.Fatalf("a %d, b %d, login %d: want %d, %d, 10", held("a"), held("b"), held("login"), want, want)
	}
	flood("c", limiter.MaxPenalties)
	for _, route := range []string{"a", "b", "c"} {
		if n := held(route); n < third-5 || n > third {
			t.Fatalf("%s holds %d, want an even share, about %d", route, n, third-5)
		}
	}
	if held("login") != 10 {
		t.Fatalf("login holds %d, want its 10", held("login"))
	}
}
