package overload_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/overload"
)

func newController(t *testing.T, o overload.Options) *overload.Controller {
	t.Helper()
	c, err := overload.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls cond until it holds, failing the test after a long while.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// ending is what became of one request that asked for a slot.
type ending struct {
	name      string
	result    overload.Result
	admission overload.Admission
}

// asker queues requests one at a time, in a known order, and reports
// each one's result on ended.
type asker struct {
	t     *testing.T
	c     *overload.Controller
	ended chan ending
	wg    sync.WaitGroup
	// shed counts the requests shed, which a request can make room with.
	shed atomic.Int64
}

func newAsker(t *testing.T, c *overload.Controller) *asker {
	a := &asker{t: t, c: c, ended: make(chan ending, 100)}
	t.Cleanup(a.wg.Wait)
	return a
}

// ask starts a request and waits until it is queued (or has ended).
func (a *asker) ask(ctx context.Context, name string, p overload.Priority, tenant string) {
	a.t.Helper()
	before, shedBefore := a.c.Queued(), a.shed.Load()
	done := make(chan struct{})
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		adm, r := a.c.Admit(ctx, p, tenant)
		if r == overload.Shed {
			a.shed.Add(1)
		}
		close(done)
		a.ended <- ending{name, r, adm}
	}()
	waitFor(a.t, name+" to queue", func() bool {
		select {
		case <-done:
			return true
		default:
			return a.c.Queued() > before || a.shed.Load() > shedBefore
		}
	})
}

func (a *asker) next() ending {
	a.t.Helper()
	select {
	case e := <-a.ended:
		return e
	case <-time.After(10 * time.Second):
		a.t.Fatal("no request ended within 10s")
		return ending{}
	}
}

// fill takes every slot of c and returns them.
func fill(t *testing.T, c *overload.Controller, n int) []overload.Admission {
	t.Helper()
	var held []overload.Admission
	for range n {
		adm, r := c.Admit(context.Background(), overload.Default, "filler")
		if r != overload.Admitted {
			t.Fatalf("filling slot: %s", r)
		}
		held = append(held, adm)
	}
	return held
}

func TestAdmission(t *testing.T) {
	t.Run("requests under the limit are admitted at once and the one over it without a queue is shed", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 2, Queue: -1})
		held := fill(t, c, 2)
		if _, r := c.Admit(context.Background(), overload.Critical, "x"); r != overload.Shed {
			t.Fatalf("third request: %s, want shed", r)
		}
		held[0].Release()
		adm, r := c.Admit(context.Background(), overload.Sheddable, "x")
		if r != overload.Admitted {
			t.Fatalf("after a release: %s, want admitted", r)
		}
		adm.Release()
		held[1].Release()
		if c.InFlight() != 0 {
			t.Fatalf("in flight %d after every release", c.InFlight())
		}
	})
	t.Run("releasing an admission twice frees one slot", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 2})
		held := fill(t, c, 2)
		held[0].Release()
		held[0].Release()
		if c.InFlight() != 1 {
			t.Fatalf("in flight %d, want 1", c.InFlight())
		}
	})
}

func TestQueueOrder(t *testing.T) {
	t.Run("a freed slot goes to the highest priority waiting", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 10, QueueTimeout: time.Minute})
		held := fill(t, c, 1)
		a := newAsker(t, c)
		a.ask(context.Background(), "sheddable", overload.Sheddable, "a")
		a.ask(context.Background(), "default", overload.Default, "b")
		a.ask(context.Background(), "critical", overload.Critical, "c")
		held[0].Release()
		var order []string
		for range 3 {
			e := a.next()
			order = append(order, e.name)
			e.admission.Release()
		}
		if got := strings.Join(order, " "); got != "critical default sheddable" {
			t.Fatalf("admitted in order %s", got)
		}
	})
	t.Run("tenants of one priority are served in turn whatever their numbers", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 10, QueueTimeout: time.Minute})
		held := fill(t, c, 1)
		a := newAsker(t, c)
		for i := range 4 {
			a.ask(context.Background(), fmt.Sprint("flood", i), overload.Default, "flood")
		}
		a.ask(context.Background(), "light0", overload.Default, "light")
		a.ask(context.Background(), "other0", overload.Default, "other")
		a.ask(context.Background(), "light1", overload.Default, "light")
		held[0].Release()
		var order []string
		for range 7 {
			e := a.next()
			order = append(order, e.name)
			e.admission.Release()
		}
		if got := strings.Join(order, " "); got != "flood0 light0 other0 flood1 light1 flood2 flood3" {
			t.Fatalf("admitted in order %s", got)
		}
	})
}

func TestShedding(t *testing.T) {
	t.Run("a full queue sheds the newest waiter of the lowest priority below the arrival's when tenants wait alike", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 3, QueueTimeout: time.Minute})
		held := fill(t, c, 1)
		a := newAsker(t, c)
		a.ask(context.Background(), "default", overload.Default, "a")
		a.ask(context.Background(), "sheddable-old", overload.Sheddable, "b")
		a.ask(context.Background(), "sheddable-new", overload.Sheddable, "c")
		a.ask(context.Background(), "critical", overload.Critical, "d")
		if e := a.next(); e.name != "sheddable-new" || e.result != overload.Shed {
			t.Fatalf("%s ended %s; want sheddable-new shed", e.name, e.result)
		}
		a.ask(context.Background(), "default-2", overload.Default, "e")
		if e := a.next(); e.name != "sheddable-old" || e.result != overload.Shed {
			t.Fatalf("%s ended %s; want sheddable-old shed", e.name, e.result)
		}
		held[0].Release()
		var order []string
		for range 3 {
			e := a.next()
			order = append(order, e.name+"="+e.result.String())
			e.admission.Release()
		}
		if got := strings.Join(order, " "); got != "critical=admitted default=admitted default-2=admitted" {
			t.Fatalf("then %s", got)
		}
	})
	t.Run("a higher arrival sheds from the tenant with the most waiting, not the newest waiter's", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 3, QueueTimeout: time.Minute})
		held := fill(t, c, 1)
		a := newAsker(t, c)
		a.ask(context.Background(), "flood0", overload.Sheddable, "flood")
		a.ask(context.Background(), "flood1", overload.Sheddable, "flood")
		a.ask(context.Background(), "light", overload.Sheddable, "light")
		a.ask(context.Background(), "default", overload.Default, "d")
		if e := a.next(); e.name != "flood1" || e.result != overload.Shed {
			t.Fatalf("%s ended %s; want flood1 shed", e.name, e.result)
		}
		held[0].Release()
		for _, want := range []string{"default", "flood0", "light"} {
			e := a.next()
			if e.name != want || e.result != overload.Admitted {
				t.Fatalf("%s %s, want %s admitted", e.name, e.result, want)
			}
			e.admission.Release()
		}
	})
	t.Run("an arrival with nobody of its tenant waiting displaces the newest waiter of a tenant holding the queue", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 3, QueueTimeout: time.Minute})
		held := fill(t, c, 1)
		a := newAsker(t, c)
		for i := range 3 {
			a.ask(context.Background(), fmt.Sprint("flood", i), overload.Sheddable, "flood")
		}
		a.ask(context.Background(), "light", overload.Sheddable, "light")
		if e := a.next(); e.name != "flood2" || e.result != overload.Shed {
			t.Fatalf("%s ended %s; want flood2 shed", e.name, e.result)
		}
		held[0].Release()
		for _, want := range []string{"flood0", "light", "flood1"} {
			e := a.next()
			if e.name != want || e.result != overload.Admitted {
				t.Fatalf("%s %s, want %s admitted", e.name, e.result, want)
			}
			e.admission.Release()
		}
	})
	t.Run("a full queue of equal shares or higher priorities sheds the arrival", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 2, QueueTimeout: time.Minute})
		held := fill(t, c, 1)
		a := newAsker(t, c)
		a.ask(context.Background(), "critical", overload.Critical, "a")
		a.ask(context.Background(), "default", overload.Default, "b")
		for _, arrival := range []struct {
			p      overload.Priority
			tenant string
		}{{overload.Sheddable, "c"}, {overload.Default, "d"}, {overload.Default, "b"}} {
			if _, r := c.Admit(context.Background(), arrival.p, arrival.tenant); r != overload.Shed {
				t.Fatalf("%s arrival from %s: %s, want shed", arrival.p, arrival.tenant, r)
			}
		}
		held[0].Release()
		for range 2 {
			e := a.next()
			e.admission.Release()
		}
	})
}

func TestLeaving(t *testing.T) {
	t.Run("a waiter past queue_timeout times out and the queue is empty again", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 5, QueueTimeout: 20 * time.Millisecond})
		held := fill(t, c, 1)
		defer held[0].Release()
		for i := range 3 {
			if _, r := c.Admit(context.Background(), overload.Critical, fmt.Sprint(i)); r != overload.TimedOut {
				t.Fatalf("waiter %d: %s, want timed_out", i, r)
			}
		}
		if c.Queued() != 0 || c.InFlight() != 1 {
			t.Fatalf("queued %d, in flight %d after the timeouts", c.Queued(), c.InFlight())
		}
	})
	t.Run("a client that leaves frees its place in the queue at once", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 1, QueueTimeout: time.Minute})
		held := fill(t, c, 1)
		a := newAsker(t, c)
		ctx, cancel := context.WithCancel(context.Background())
		a.ask(ctx, "leaver", overload.Default, "a")
		cancel()
		if e := a.next(); e.name != "leaver" || e.result != overload.Left {
			t.Fatalf("%s ended %s", e.name, e.result)
		}
		if c.Queued() != 0 {
			t.Fatalf("queued %d after the client left", c.Queued())
		}
		a.ask(context.Background(), "next", overload.Sheddable, "b")
		held[0].Release()
		if e := a.next(); e.name != "next" || e.result != overload.Admitted {
			t.Fatalf("%s ended %s", e.name, e.result)
		}
		if c.InFlight() != 1 {
			t.Fatalf("in flight %d", c.InFlight())
		}
	})
	t.Run("many waiters that time out leave no goroutine or tenant behind", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 1000, QueueTimeout: 5 * time.Millisecond})
		held := fill(t, c, 1)
		defer held[0].Release()
		before := runtime.NumGoroutine()
		var wg sync.WaitGroup
		for i := range 500 {
			wg.Go(func() { c.Admit(context.Background(), overload.Default, fmt.Sprint(i%50)) })
		}
		wg.Wait()
		if c.Queued() != 0 {
			t.Fatalf("queued %d", c.Queued())
		}
		waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	})
}

func TestReconfigure(t *testing.T) {
	t.Run("waiters survive new numbers and each is admitted once", func(t *testing.T) {
		c := newController(t, overload.Options{MaxInFlight: 1, Queue: 10, QueueTimeout: time.Minute})
		held := fill(t, c, 1)
		a := newAsker(t, c)
		for i := range 5 {
			a.ask(context.Background(), fmt.Sprint(i), overload.Default, fmt.Sprint(i))
		}
		if err := c.Reconfigure(overload.Options{MaxInFlight: 3, Queue: 2, QueueTimeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
		var admitted []string
		for range 2 {
			e := a.next()
			if e.result != overload.Admitted {
				t.Fatalf("%s %s", e.name, e.result)
			}
			admitted = append(admitted, e.name)
			defer e.admission.Release()
		}
		if c.Queued() != 3 || c.InFlight() != 3 {
			t.Fatalf("queued %d, in flight %d; want 3 and 3", c.Queued(), c.InFlight())
		}
		held[0].Release()
		for range 3 {
			e := a.next()
			if e.result != overload.Admitted {
				t.Fatalf("%s %s", e.name, e.result)
			}
			admitted = append(admitted, e.name)
			e.admission.Release()
		}
		slices.Sort(admitted)
		if got := strings.Join(admitted, ""); got != "01234" {
			t.Fatalf("admitted %s", got)
		}
	})
}

func TestProblems(t *testing.T) {
	cases := []struct {
		name string
		o    overload.Options
		want string
	}{
		{"max_in_flight is required", overload.Options{}, "max_in_flight"},
		{"min_limit above max_in_flight is refused", overload.Options{Adaptive: true, MinLimit: 9, MaxInFlight: 8}, "min_limit"},
		{"min_limit without adaptive is refused", overload.Options{MinLimit: 2, MaxInFlight: 8}, "min_limit"},
		{"a queue_timeout under a millisecond is refused", overload.Options{MaxInFlight: 8, QueueTimeout: time.Microsecond}, "queue_timeout"},
		{"a whole adaptive block passes", overload.Options{Adaptive: true, MinLimit: 8, MaxInFlight: 8, Queue: -1, QueueTimeout: time.Second}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, e := range option.Within("", c.o.Validate()) {
				got = append(got, e.(*option.Error).Field)
			}
			if strings.Join(got, ",") != c.want {
				t.Fatalf("problems with %v, want %q", got, c.want)
			}
			if _, err := overload.New(c.o); (err == nil) != (c.want == "") {
				t.Fatalf("New: %v", err)
			}
		})
	}
}
