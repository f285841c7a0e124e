package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// runRole is the harness started again as one of its helper processes.
func runRole(role string, args []string) int {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on")
	upstream := fs.String("upstream", "", "upstream URL (bare proxy)")
	target := fs.String("url", "", "URL to load (load generator)")
	conns := fs.Int("c", 64, "connections (load generator)")
	duration := fs.Duration("d", 8*time.Second, "how long to load (load generator)")
	subjects := fs.Int("subjects", 1, "client addresses to rotate through in X-Forwarded-For (load generator); 1 sends none")
	from := fs.Int("from", 0, "the rotation's first client address, counted from 10.0.0.0 (load generator)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	switch role {
	case "internal-upstream":
		err = serveUpstream(*listen)
	case "internal-bare-proxy":
		err = serveBareProxy(*listen, *upstream)
	case "internal-load":
		err = generateLoad(os.Stdout, *target, *conns, *duration, *subjects, *from)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
		return 1
	}
	return 0
}

// upstreamStatsPath answers the upstream's counters; it is asked directly,
// never through a proxy.
const upstreamStatsPath = "/__bench/stats"

// serveBareProxy is the floor the gateway is measured against: a
// ReverseProxy with Rewrite + SetURL and a Transport that keeps enough idle
// connections for any connection count the harness uses, nothing else.
func serveBareProxy(addr, upstream string) error {
	target, err := url.Parse(upstream)
	if err != nil || target.Host == "" {
		return fmt.Errorf("-upstream %q: want an http:// URL", upstream)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport: &http.Transport{MaxIdleConnsPerHost: 4096},
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return (&http.Server{Handler: proxy}).Serve(l)
}

// goLoadResult is what the Go load generator prints, as one JSON object.
type goLoadResult struct {
	Requests  int64   `json:"requests"`
	Seconds   float64 `json:"seconds"`
	Non2xx    int64   `json:"non2xx"`
	Errors    int64   `json:"errors"`
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
	Status429 int64   `json:"status_429"`
}

// generateLoad is the stand-in for wrk: conns keep-alive connections, each
// sending its next GET when the last answer is read, for d. With subjects
// above 1 each request names the next of that many client addresses in
// X-Forwarded-For, from the from-th, as wrk's rotation script does.
func generateLoad(w io.Writer, target string, conns int, d time.Duration, subjects, from int) error {
	if target == "" || conns < 1 || subjects < 1 || subjects > maxSubjects || from < 0 {
		return fmt.Errorf("need -url, -c >= 1, -subjects from 1 to %d and -from >= 0", maxSubjects)
	}
	var addrs []string
	if subjects > 1 {
		addrs = make([]string, subjects)
		for i := range addrs {
			addrs[i] = rotatedAddr(i)
		}
	}
	var nextAddr atomic.Int64
	nextAddr.Store(int64(from))
	transport := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true}
	client := &http.Client{Transport: transport}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		res       goLoadResult
		wg        sync.WaitGroup
	)
	start := time.Now()
	for range conns {
		wg.Go(func() {
			var mine []time.Duration
			var n, non2xx, tooMany, errs int64
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
				if addrs != nil {
					req.Header["X-Forwarded-For"] = []string{addrs[(nextAddr.Add(1)-1)%int64(len(addrs))]}
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						errs++
					}
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil {
					if ctx.Err() == nil {
						errs++
					}
					continue
				}
				mine = append(mine, time.Since(t0))
				n++
				if resp.StatusCode >= 400 {
					non2xx++
				}
				if resp.StatusCode == http.StatusTooManyRequests {
					tooMany++
				}
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			res.Requests += n
			res.Non2xx += non2xx
			res.Status429 += tooMany
			res.Errors += errs
			mu.Unlock()
		})
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	slices.Sort(latencies)
	res.P50Micros = float64(percentile(latencies, 50).Microseconds())
	res.P99Micros = float64(percentile(latencies, 99).Microseconds())
	return json.NewEncoder(w).Encode(res)
}

// percentile of sorted durations, nearest rank; 0 when empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
