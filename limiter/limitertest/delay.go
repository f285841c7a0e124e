package limitertest

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// delayed returns p with max_delay d.
func delayed(p *limiter.Policy, d time.Duration) *limiter.Policy {
	p.MaxDelay = d
	return p
}

// runDelay holds a backend to the rules of Policy.MaxDelay: a request
// admissible within it is admitted at once with a delay, its place taken
// then, and a give-back returns the place.
func runDelay(t *testing.T, newBackend Factory) {
	// hold asks for ps at cost 1 as a caller that can hold the request
	// (mayDelay), under an evaluation ID of its own.
	hold := func(t *testing.T, b Backend, ps *limiter.PolicySet, s string, mayDelay bool) (limiter.Request, limiter.Evaluated) {
		t.Helper()
		req := limiter.Request{Policies: ps, Subject: s, Cost: 1, EvaluationID: Subject(), MayDelay: mayDelay}
		e, ok := b.Evaluate(ctx(t), req).(limiter.Evaluated)
		if !ok {
			t.Fatalf("outcome %#v, want Evaluated", e)
		}
		return req, e
	}
	t.Run("a burst past a bucket's capacity is admitted with delays spaced by the refill, and past max_delay refused", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		p := delayed(TokenBucket(2, 1, 250*time.Millisecond), time.Second)
		ps := One(p)
		s := Subject()
		for i, want := range []time.Duration{0, 0, 250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second} {
			req, e := hold(t, b, ps, s, true)
			if !e.Allowed || e.Delay() != want || e.Remaining != 1-int64(i) || limiter.Held(req, e) != want {
				t.Fatalf("request %d: allowed %v, delay %s, remaining %d, held %s; want allowed after %s with %d left",
					i+1, e.Allowed, e.Delay(), e.Remaining, limiter.Held(req, e), want, 1-int64(i))
			}
		}
		// The seventh's token is due in 1.25s: refused, and a retry in
		// 250ms is admitted, held for the whole second.
		_, e := hold(t, b, ps, s, true)
		if e.Allowed || e.RetryAfter != 250*time.Millisecond || e.Remaining != -4 {
			t.Fatalf("past max_delay: allowed %v, retry %s, remaining %d; want refused, retry 250ms, -4", e.Allowed, e.RetryAfter, e.Remaining)
		}
		clock.Advance(250 * time.Millisecond)
		if _, e := hold(t, b, ps, s, true); !e.Allowed || e.Delay() != time.Second || e.Remaining != -4 {
			t.Fatalf("after the refill: allowed %v, delay %s, remaining %d; want allowed after 1s with -4 left (the refusal took nothing)", e.Allowed, e.Delay(), e.Remaining)
		}
	})
	t.Run("a full window reserves places in the next one when it starts within max_delay", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		p := delayed(FixedWindow(2, time.Second), 500*time.Millisecond)
		ps := One(p)
		s := Subject()
		clock.Advance(100 * time.Millisecond)
		hold(t, b, ps, s, true)
		hold(t, b, ps, s, true)
		if _, e := hold(t, b, ps, s, true); e.Allowed || e.RetryAfter != 400*time.Millisecond {
			t.Fatalf("900ms before the next window: allowed %v, retry %s; want refused, retry 400ms", e.Allowed, e.RetryAfter)
		}
		clock.Advance(500 * time.Millisecond)
		for i := range 2 {
			if _, e := hold(t, b, ps, s, true); !e.Allowed || e.Delay() != 400*time.Millisecond || e.Remaining != 1-int64(i) || e.ResetAfter != 1400*time.Millisecond {
				t.Fatalf("reservation %d: allowed %v, delay %s, remaining %d, reset %s; want allowed after 400ms, %d left, reset 1.4s",
					i+1, e.Allowed, e.Delay(), e.Remaining, e.ResetAfter, 1-int64(i))
			}
		}
		// The next window is full too: a retry is held into the one after,
		// which starts within max_delay 900ms from now.
		if _, e := hold(t, b, ps, s, true); e.Allowed || e.RetryAfter != 900*time.Millisecond {
			t.Fatalf("both windows full: allowed %v, retry %s; want refused, retry 900ms", e.Allowed, e.RetryAfter)
		}
		clock.Advance(400 * time.Millisecond)
		if _, e := hold(t, b, ps, s, true); e.Allowed || e.Remaining != 0 || e.RetryAfter != 500*time.Millisecond {
			t.Fatalf("in the reserved window: allowed %v, remaining %d, retry %s; want refused (its places are taken), 0 left, retry 500ms", e.Allowed, e.Remaining, e.RetryAfter)
		}
	})
	t.Run("a held request's place is given back once, where it was taken", func(t *testing.T) {
		for i, p := range []*limiter.Policy{delayed(TokenBucket(1, 1, time.Second), time.Second), delayed(FixedWindow(1, time.Second), time.Second)} {
			clock := NewClock()
			b := newBackend(t, clock)
			// The request's other policy gets its cost back too: a fixed
			// window's, or a sliding counter's.
			other := []*limiter.Policy{FixedWindow(10, time.Minute), SlidingCounter(10, time.Minute)}[i]
			ps := limiter.MustPolicySet(p, other)
			s := Subject()
			clock.Advance(100 * time.Millisecond)
			hold(t, b, ps, s, true)
			req, e := hold(t, b, ps, s, true)
			if limiter.Held(req, e) == 0 {
				t.Fatalf("%s: the second request is not held: %+v", p.Algorithm, e)
			}
			if _, again := hold(t, b, ps, s, true); again.Allowed {
				t.Fatalf("%s: a third request fits before the give-back: %+v", p.Algorithm, again)
			}
			e.Admitted().GiveBack()
			e.Admitted().GiveBack()
			waitGiveBack(b)
			clock.Advance(time.Millisecond)
			next, e := hold(t, b, ps, s, true)
			if limiter.Held(next, e) == 0 || e.Policies[1].Remaining != 8 {
				t.Fatalf("%s: after the give-back: held %s, the other policy has %d left; want held, 8 left (one for each request that went on)",
					p.Algorithm, limiter.Held(next, e), e.Policies[1].Remaining)
			}
			if _, again := hold(t, b, ps, s, true); again.Allowed {
				t.Fatalf("%s: a place given back twice: %+v", p.Algorithm, again)
			}
		}
	})
	t.Run("a request its caller cannot hold is refused as without max_delay", func(t *testing.T) {
		// A gateway instance holding limiter.max_delayed requests asks so.
		b := newBackend(t, NewClock())
		p := delayed(TokenBucket(1, 1, time.Second), time.Second)
		s := Subject()
		hold(t, b, One(p), s, false)
		if _, e := hold(t, b, One(p), s, false); e.Allowed || e.RetryAfter != time.Second {
			t.Fatalf("allowed %v, retry %s; want refused, retry 1s", e.Allowed, e.RetryAfter)
		}
		if _, e := hold(t, b, One(p), s, true); !e.Allowed || e.Delay() != time.Second {
			t.Fatalf("a caller that can hold it: allowed %v, delay %s; want allowed after 1s", e.Allowed, e.Delay())
		}
	})
	t.Run("several policies: the request waits for the longest delay, and all reserve or none", func(t *testing.T) {
		clock := NewClock()
		b := newBackend(t, clock)
		slow, fast := delayed(TokenBucket(1, 1, time.Second), time.Second), delayed(TokenBucket(1, 1, 500*time.Millisecond), time.Second)
		s := Subject()
		hold(t, b, limiter.MustPolicySet(slow, fast), s, true)
		req, e := hold(t, b, limiter.MustPolicySet(slow, fast), s, true)
		if !e.Allowed || e.Delay() != time.Second || e.Policies[1].Delay() != 500*time.Millisecond || limiter.Held(req, e) != time.Second {
			t.Fatalf("delays %s and %s, summed up as %s; want 1s and 500ms, held 1s", e.Policies[0].Delay(), e.Policies[1].Delay(), e.Delay())
		}
		full := FixedWindow(1, time.Minute)
		t2 := Subject()
		hold(t, b, limiter.MustPolicySet(slow, full), t2, true)
		if _, e := hold(t, b, limiter.MustPolicySet(slow, full), t2, true); e.Allowed || !e.Policies[0].Allowed {
			t.Fatalf("one policy full: %+v; want refused, the other would have delayed", e)
		}
		if _, e := hold(t, b, One(slow), t2, true); e.Delay() != time.Second || e.Remaining != -1 {
			t.Fatalf("after the refusal: delay %s, remaining %d; want 1s, -1 (the refusal reserved nothing)", e.Delay(), e.Remaining)
		}
	})
	t.Run("a shadow policy's delay holds nothing", func(t *testing.T) {
		b := newBackend(t, NewClock())
		shadow := delayed(TokenBucket(1, 1, time.Second), time.Second)
		shadow.Shadow = true
		ps := limiter.MustPolicySet(FixedWindow(10, time.Minute), shadow)
		s := Subject()
		hold(t, b, ps, s, true)
		req, e := hold(t, b, ps, s, true)
		if !e.Allowed || e.Policies[1].Delay() != time.Second || limiter.Held(req, e) != 0 {
			t.Fatalf("allowed %v, shadow delay %s, held %s; want allowed, 1s reported, nothing held", e.Allowed, e.Policies[1].Delay(), limiter.Held(req, e))
		}
	})
	t.Run("a retried delayed evaluation returns its delay and reserves once", func(t *testing.T) {
		b := newBackend(t, NewClock())
		p := delayed(TokenBucket(1, 1, time.Second), 2*time.Second)
		s := Subject()
		hold(t, b, One(p), s, true)
		req := limiter.Request{Policies: One(p), Subject: s, Cost: 1, EvaluationID: "retried", MayDelay: true}
		first := evaluated(t, b.Evaluate(ctx(t), req))
		again := evaluated(t, b.Evaluate(ctx(t), req))
		if again != first || first.Delay() != time.Second {
			t.Fatalf("retry %+v, first %+v; want the first, delayed 1s", again, first)
		}
		if _, e := hold(t, b, One(p), s, true); e.Delay() != 2*time.Second {
			t.Fatalf("next: delay %s, want 2s", e.Delay())
		}
	})
}

// waitGiveBack waits for the give-backs a backend sends in the
// background, if it has a way to say (Redis).
func waitGiveBack(b Backend) {
	if w, ok := b.(interface{ WaitReleases() }); ok {
		w.WaitReleases()
	}
}
