package limitertest

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// leaseHolder is one admitted request and the decision it holds leases by.
type leaseHolder struct {
	req limiter.Request
	e   limiter.Evaluated
}

// acquire asks b for ps at cost for subject under a fresh evaluation ID.
func acquire(t *testing.T, b Backend, ps *limiter.PolicySet, subject string, cost int64) leaseHolder {
	t.Helper()
	req := limiter.Request{Policies: ps, Subject: subject, Cost: cost, EvaluationID: Subject()}
	o := b.Evaluate(ctx(t), req)
	e, ok := o.(limiter.Evaluated)
	if !ok {
		t.Fatalf("outcome %#v, want Evaluated", o)
	}
	return leaseHolder{req, e}
}

// release gives h's leases back and waits until a backend that releases
// in the background (Redis) has sent it.
func release(t *testing.T, b Backend, h leaseHolder) {
	t.Helper()
	h.e.Admitted().Release()
	if w, ok := b.(interface{ WaitReleases() }); ok {
		w.WaitReleases()
	}
}

// free is what a concurrency policy has free for subject, asked and
// released at once (a shadow policy takes its lease even when it would
// refuse).
func free(t *testing.T, b Backend, p *limiter.Policy, subject string) int64 {
	t.Helper()
	h := acquire(t, b, One(p), subject, 1)
	release(t, b, h)
	if !h.e.Allowed {
		return h.e.Remaining
	}
	return h.e.Remaining + 1
}

// heldFor checks that the one slot of p is held a millisecond short of d
// from now, and free at d (once what).
func heldFor(t *testing.T, clock *Clock, b Backend, p *limiter.Policy, subject string, d time.Duration, what string) {
	t.Helper()
	clock.Advance(d - time.Millisecond)
	if n := free(t, b, p, subject); n != 0 {
		t.Fatalf("%d free before %s, want 0", n, what)
	}
	clock.Advance(time.Millisecond)
	if n := free(t, b, p, subject); n != 1 {
		t.Fatalf("%d free once %s, want 1", n, what)
	}
}

// runConcurrency holds a backend to the concurrency algorithm's rules.
func runConcurrency(t *testing.T, newBackend Factory) {
	one := func(p *limiter.Policy) *limiter.PolicySet { return One(p) }
	t.Run("concurrency admits the limit at once, refuses the next, and admits again when one is released", func(t *testing.T) {
		p := Concurrency(3, 10*time.Second)
		b := newBackend(t, NewClock())
		s := Subject()
		var held []leaseHolder
		for i := range 3 {
			h := acquire(t, b, one(p), s, 1)
			if !h.e.Allowed || h.e.Remaining != int64(2-i) || h.e.Limit != 3 {
				t.Fatalf("request %d: %+v, want allowed with %d free", i+1, h.e.Decision, 2-i)
			}
			held = append(held, h)
		}
		h := acquire(t, b, one(p), s, 1)
		if h.e.Allowed || h.e.Remaining != 0 || h.e.RetryAfter != time.Second {
			t.Fatalf("fourth request: %+v, want refused, 0 free, retry after 1s", h.e.Decision)
		}
		if _, ok := b.StandingDenial(h.req); ok {
			t.Fatal("a concurrency refusal was reported as a standing denial")
		}
		release(t, b, held[0])
		release(t, b, h) // a refused request holds nothing: this must free nothing
		if n := free(t, b, p, s); n != 1 {
			t.Fatalf("%d free after one release, want 1", n)
		}
	})
	t.Run("concurrency takes cost leases and gives them back together", func(t *testing.T) {
		p := Concurrency(5, 10*time.Second)
		b := newBackend(t, NewClock())
		s := Subject()
		h := acquire(t, b, one(p), s, 3)
		if !h.e.Allowed || h.e.Remaining != 2 {
			t.Fatalf("cost 3 of 5: %+v", h.e.Decision)
		}
		if r := acquire(t, b, one(p), s, 3); r.e.Allowed || r.e.Remaining != 2 {
			t.Fatalf("cost 3 with 2 free: %+v, want refused", r.e.Decision)
		}
		release(t, b, h)
		if n := free(t, b, p, s); n != 5 {
			t.Fatalf("%d free after the release, want 5", n)
		}
	})
	t.Run("a lease neither released nor renewed is void after lease_ttl", func(t *testing.T) {
		p := Concurrency(1, 2*time.Second)
		clock := NewClock()
		b := newBackend(t, clock)
		s := Subject()
		acquire(t, b, one(p), s, 1)
		heldFor(t, clock, b, p, s, 2*time.Second, "lease_ttl passed")
	})
	t.Run("a renewed lease lives lease_ttl from its renewal, and a released one is not revived", func(t *testing.T) {
		p := Concurrency(1, 3*time.Second)
		clock := NewClock()
		b := newBackend(t, clock)
		s := Subject()
		h := acquire(t, b, one(p), s, 1)
		clock.Advance(time.Second)
		h.e.Admitted().Renew(ctx(t))
		heldFor(t, clock, b, p, s, 3*time.Second, "the renewed lease ran out") // 4s after the decision, 3s after the renewal
		h = acquire(t, b, one(p), s, 1)
		release(t, b, h)
		h.e.Admitted().Renew(ctx(t))
		if n := free(t, b, p, s); n != 1 {
			t.Fatalf("%d free after a renewal of a released lease, want 1", n)
		}
	})
	t.Run("a retried acquire under the same evaluation ID takes no second lease", func(t *testing.T) {
		p := Concurrency(2, 10*time.Second)
		b := newBackend(t, NewClock())
		s := Subject()
		h := acquire(t, b, one(p), s, 1)
		again := evaluated(t, b.Evaluate(ctx(t), h.req))
		if !again.Allowed || again.Remaining != 1 {
			t.Fatalf("the retry: %+v, want the first decision", again)
		}
		if n := free(t, b, p, s); n != 1 {
			t.Fatalf("%d free, want 1", n)
		}
	})
	t.Run("several policies with concurrency: a refused request takes no lease and is charged nothing", func(t *testing.T) {
		inFlight, perMinute := Concurrency(5, 10*time.Second), FixedWindow(2, time.Minute)
		ps := limiter.MustPolicySet(inFlight, perMinute)
		b := newBackend(t, NewClock())
		s := Subject()
		var held []leaseHolder
		for i := range 4 {
			h := acquire(t, b, ps, s, 1)
			if h.e.Allowed != (i < 2) {
				t.Fatalf("request %d: allowed %v", i+1, h.e.Allowed)
			}
			held = append(held, h)
		}
		if n := free(t, b, inFlight, s); n != 3 {
			t.Fatalf("%d leases free with two admitted requests open, want 3", n)
		}
		// The concurrency policy refuses: the window is charged nothing.
		full := Concurrency(1, 10*time.Second)
		s2 := Subject()
		acquire(t, b, one(full), s2, 1)
		window := FixedWindow(5, time.Minute)
		for range 3 {
			if h := acquire(t, b, limiter.MustPolicySet(full, window), s2, 1); h.e.Allowed {
				t.Fatal("admitted past the concurrency limit")
			}
		}
		if n := left(t, b, window, s2); n != 5 {
			t.Fatalf("the window was charged for refused requests: %d left, want 5", n)
		}
		for _, h := range held {
			release(t, b, h)
		}
		if n := free(t, b, inFlight, s); n != 5 {
			t.Fatalf("%d free after every release, want 5", n)
		}
	})
	t.Run("a shadow concurrency policy's would-be refusal is admitted and takes its lease", func(t *testing.T) {
		p := Concurrency(1, 10*time.Second)
		p.Shadow = true
		b := newBackend(t, NewClock())
		s := Subject()
		a := acquire(t, b, one(p), s, 1)
		c := acquire(t, b, one(p), s, 1)
		if !a.e.Allowed || c.e.Allowed {
			t.Fatalf("decisions %+v then %+v, want allowed then a would-be refusal", a.e.Decision, c.e.Decision)
		}
		release(t, b, a)
		if n := free(t, b, p, s); n != 0 {
			t.Fatalf("%d free with the second request's lease held, want 0", n)
		}
		release(t, b, c)
		if n := free(t, b, p, s); n != 1 {
			t.Fatalf("%d free after both releases, want 1", n)
		}
	})
}
