package proxy_test

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
)

// stay is one request's time at the upstream, by subject.
type stay struct {
	subject    string
	start, end time.Time
}

// peakInFlight is the most requests of each subject the upstream held at
// once: the checker for concurrency limits, a pure function of the
// upstream's record. A request that ends at the instant another starts is
// not counted with it.
func peakInFlight(stays []stay) map[string]int {
	type edge struct {
		at    time.Time
		delta int
	}
	bySubject := map[string][]edge{}
	for _, s := range stays {
		bySubject[s.subject] = append(bySubject[s.subject], edge{s.start, 1}, edge{s.end, -1})
	}
	peaks := map[string]int{}
	for subject, edges := range bySubject {
		slices.SortFunc(edges, func(a, b edge) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.delta - b.delta // ends first
		})
		n := 0
		for _, e := range edges {
			n += e.delta
			peaks[subject] = max(peaks[subject], n)
		}
	}
	return peaks
}

func TestInFlightCheckerCatchesBadHistories(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	for _, c := range []struct {
		name  string
		stays []stay
		want  map[string]int
	}{
		{"three overlapping requests are three at once", []stay{{"a", at(0), at(10)}, {"a", at(5), at(15)}, {"a", at(9), at(20)}}, map[string]int{"a": 3}},
		{"a request that starts as another ends is not counted with it", []stay{{"a", at(0), at(10)}, {"a", at(10), at(20)}}, map[string]int{"a": 1}},
		{"subjects are counted apart", []stay{{"a", at(0), at(10)}, {"b", at(1), at(10)}, {"b", at(2), at(10)}}, map[string]int{"a": 1, "b": 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := peakInFlight(c.stays); !maps(got, c.want) {
				t.Fatalf("peaks %v, want %v", got, c.want)
			}
		})
	}
}

func maps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestInFlightExactnessAcrossFourGatewaysSharingOneRedis: four gateways,
// each with its own limiter, share one Redis (standalone, then Cluster);
// 64 clients send to them as fast as they can for three seconds, to an
// upstream that holds each request 400 ms, behind a concurrency limit of
// 10 per subject. The upstream never holds more than 10 of a subject's
// requests at once, and does hold 10; once the load is over, no gateway
// holds a lease.
func TestInFlightExactnessAcrossFourGatewaysSharingOneRedis(t *testing.T) {
	const (
		instances = 4
		clients   = 64
		limit     = 10
		hold      = 400 * time.Millisecond
		// A refused client waits this long before it asks again, as one
		// that reads Retry-After would wait longer: without it the
		// refusals alone keep a loaded machine's cores busy.
		pause = 10 * time.Millisecond
		run   = 3 * time.Second
	)
	cluster := redistest.StartCluster(t)
	principals := []string{"alice@example.com", "bob@example.com", "carol@example.com"}
	for _, c := range []struct {
		name       string
		opts       func(t *testing.T) limiter.RedisOptions
		principals []string
	}{
		{"standalone Redis, one client address", func(t *testing.T) limiter.RedisOptions {
			return limiter.RedisOptions{Addrs: []string{redistest.Start(t).Addr}}
		}, nil},

		{"Redis Cluster, three principals from a trusted proxy", func(t *testing.T) limiter.RedisOptions {
			return limiter.RedisOptions{Mode: limiter.RedisCluster, Addrs: cluster.Addrs()}
		}, principals},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := c.opts(t)
			var mu sync.Mutex
			var stays []stay
			up := newSlowUpstream(t) // only its URL and cleanup: the handler is replaced
			up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s := stay{subject: r.Header.Get(principalHeader), start: time.Now()}
				time.Sleep(hold)
				s.end = time.Now()
				mu.Lock()
				stays = append(stays, s)
				mu.Unlock()
			})
			p := redisPolicy(limitertest.Concurrency(limit, 30*time.Second), "in-flight-"+limitertest.Subject()[3:11])
			var trusted []string
			if len(c.principals) > 0 {
				trusted = []string{"127.0.0.1/32"}
			}
			var gateways []*gateway
			var metrics []*proxy.Metrics
			for range instances {
				m := proxy.NewMetrics(prometheus.NewRegistry())
				metrics = append(metrics, m)
				gateways = append(gateways, newGateway(t, setup{
					routes:  []proxy.Route{concurrencyRoute(t, up.URL, p)},
					limiter: redistest.NewLimiter(t, opts),
					trusted: trusted,
					metrics: m,
				}))
			}
			var answers statusCounter
			var wg sync.WaitGroup
			deadline := time.Now().Add(run)
			for i := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
					defer client.CloseIdleConnections()
					for time.Now().Before(deadline) {
						req, _ := http.NewRequest("GET", gateways[i%instances].URL+"/report", nil)
						if len(c.principals) > 0 {
							req.Header.Set(principalHeader, c.principals[i%len(c.principals)])
						}
						switch answers.send(t, client, req) {
						case 0:
							return
						case http.StatusTooManyRequests:
							time.Sleep(pause)
						}
					}
				}()
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			statuses := answers.counts()
			if len(statuses) != 2 || statuses[200] == 0 || statuses[429] == 0 {
				t.Fatalf("statuses %v, want only 200 and 429", statuses)
			}
			peaks := peakInFlight(stays)
			subjects := c.principals
			if len(subjects) == 0 {
				subjects = []string{""}
			}
			for _, s := range subjects {
				if peaks[s] != limit {
					t.Errorf("subject %q: the upstream held %d of its requests at once, want exactly %d (statuses %v)", s, peaks[s], limit, statuses)
				}
			}
			for i, m := range metrics {
				if n := testutil.ToFloat64(m.LeasesHeld.WithLabelValues("reports", p.Name)); n != 0 {
					t.Errorf("gateway %d holds %v leases after the load, want 0", i, n)
				}
			}
		})
	}
}
