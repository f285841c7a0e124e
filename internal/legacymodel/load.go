package legacymodel

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Tenant is one source of offered load: a principal (X-Auth-Principal),
// on Plan when not empty (X-Auth-Plan), sending GET Path at Rate requests
// a second whatever the answers: an open loop, as clients under overload
// are.
type Tenant struct {
	Name, Path, Plan string
	Rate             float64
}

// Result is what one tenant's requests answered within the measured time.
type Result struct {
	Tenant
	Answered  int // answers (or errors) that came while measuring
	OK        int // of them 2xx
	Statuses  map[int]int
	Latencies []time.Duration // of the 2xx answers
}

// Load drives tenants against a gateway. Answers count while Measuring
// is on.
type Load struct {
	measuring atomic.Bool
	mu        sync.Mutex
	results   []*Result
	wg        sync.WaitGroup
	stop      context.CancelFunc
}

// Start drives each tenant against base (the gateway's URL) with client,
// until Stop.
func Start(base string, client *http.Client, tenants []Tenant) *Load {
	ctx, stop := context.WithCancel(context.Background())
	l := &Load{stop: stop}
	for _, t := range tenants {
		r := &Result{Tenant: t, Statuses: map[int]int{}}
		l.results = append(l.results, r)
		l.wg.Add(1)
		go l.drive(ctx, base, client, r)
	}
	return l
}

func (l *Load) drive(ctx context.Context, base string, client *http.Client, r *Result) {
	defer l.wg.Done()
	tick := time.NewTicker(time.Duration(float64(time.Second) / r.Rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			start := time.Now()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+r.Path, nil)
			req.Header.Set("X-Auth-Principal", r.Name)
			if r.Plan != "" {
				req.Header.Set("X-Auth-Plan", r.Plan)
			}
			status := 0
			if res, err := client.Do(req); err == nil {
				res.Body.Close()
				status = res.StatusCode
			}
			took := time.Since(start)
			if !l.measuring.Load() {
				return // answered outside the measured time
			}
			l.mu.Lock()
			defer l.mu.Unlock()
			r.Answered++
			r.Statuses[status]++
			if status/100 == 2 {
				r.OK++
				r.Latencies = append(r.Latencies, took)
			}
		}()
	}
}

// Measure counts the answers that come from now on, for d, and returns
// each tenant's, in the order given to Start.
func (l *Load) Measure(d time.Duration) []Result {
	l.measuring.Store(true)
	time.Sleep(d)
	l.measuring.Store(false)
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Result, len(l.results))
	for i, r := range l.results {
		out[i] = *r
		out[i].Statuses = maps.Clone(r.Statuses)
		out[i].Latencies = slices.Clone(r.Latencies)
		r.Answered, r.OK, r.Statuses, r.Latencies = 0, 0, map[int]int{}, nil
	}
	return out
}

// Stop ends the load and waits for the requests under way.
func (l *Load) Stop() {
	l.stop()
	l.wg.Wait()
}

// Percentile is the p-quantile (0 to 1) of ds, 0 for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// Scenario is the load the overload block is shown against: three times
// capacity from tenants of every priority on the routes "/critical",
// "/default" and "/batch" (lowered to sheddable for the plan "free"), one
// tenant flooding the sheddable priority. Critical and default traffic
// fit within capacity; the sheddable priority gets what is left.
func Scenario(capacity float64) []Tenant {
	return []Tenant{
		{Name: "checkout", Path: "/critical", Rate: 0.2 * capacity},
		{Name: "orders-a", Path: "/default", Rate: 0.25 * capacity},
		{Name: "orders-b", Path: "/default", Rate: 0.25 * capacity},
		{Name: "flood", Path: "/batch", Plan: "free", Rate: 2.1 * capacity},
		{Name: "light", Path: "/batch", Plan: "free", Rate: 0.2 * capacity},
	}
}
