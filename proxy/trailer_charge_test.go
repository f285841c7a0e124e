package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
)

// trailerRoute is a route charged by the X-Usage-Cost trailer (at most
// 50) on a 100-token bucket, to a pool of up whose response timeout is
// timeout.
func trailerRoute(up *upstream, timeout time.Duration) (proxy.Route, proxy.Pool) {
	p := policy(limitertest.TokenBucket(100, 1, time.Hour), "usage")
	p.CostHeader, p.MaxCost = "X-Usage-Cost", 50
	rt := route("stream", "/stream", up, nil, p)
	rt.Upstream, rt.Pool = "", "streams"
	return rt, proxy.Pool{Name: "streams", Targets: []string{up.URL}, ResponseTimeout: timeout}
}

// hangUpAfter reads the head and the body's first len(part) bytes from
// url with method, then hangs up, and returns what RateLimit said of the usage policy.
func hangUpAfter(t *testing.T, method, url, part string) int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var body io.Reader
	if method == "POST" {
		body = strings.NewReader("a body")
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, body)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	buf := make([]byte, len(part))
	if _, err := io.ReadFull(res.Body, buf); err != nil || res.StatusCode != 200 || string(buf) != part {
		t.Fatalf("%d, %q, %v; want 200 and %q", res.StatusCode, buf, err, part)
	}
	return remaining(t, res, "usage")
}

// waitLogged waits until the gateway has logged n requests as done.
func waitLogged(t *testing.T, g *gateway, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); strings.Count(g.logs.String(), `"msg":"request"`) < n; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d requests logged as done, want %d: %s", strings.Count(g.logs.String(), `"msg":"request"`), n, g.logs.String())
		}
	}
}

// A client that hangs up before the cost trailer does not decide the
// cost: the gateway reads on to the trailer, and charges what it says
// (added to what the head said). Over the standard transport (a request
// with a body) and the lean one (a GET), after the last data chunk or
// before megabytes more.
func TestAClientThatHangsUpBeforeTheCostTrailerIsChargedItsCost(t *testing.T) {
	for _, c := range []struct {
		name   string
		method string
		rest   int    // body bytes the upstream sends after the client left
		head   string // the cost the head states, if any
	}{
		{"after the last data chunk of a POST", "POST", 0, ""},
		{"after the last data chunk of a GET", "GET", 0, ""},
		{"before megabytes more of a GET", "GET", 4 << 20, ""},
		{"before megabytes more, the head's cost added to", "GET", 4 << 20, "1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// gone is closed once the gateway has seen the client leave;
			// only then does the upstream send the rest and its trailer.
			gone := make(chan struct{})
			var first atomic.Bool
			up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Trailer", "X-Usage-Cost")
				if c.head != "" {
					w.Header().Set("X-Usage-Cost", c.head)
				}
				io.WriteString(w, "all the data")
				w.(http.Flusher).Flush()
				if first.CompareAndSwap(false, true) {
					<-gone
					w.Write(make([]byte, c.rest))
				}
				w.Header().Set("X-Usage-Cost", "40")
			})
			rt, pool := trailerRoute(up, time.Minute)
			g := newGateway(t, setup{routes: []proxy.Route{rt}, pools: []proxy.Pool{pool}})
			var once atomic.Bool
			watched := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if once.CompareAndSwap(false, true) {
					context.AfterFunc(r.Context(), func() { close(gone) })
				}
				g.handler.ServeHTTP(w, r)
			}))
			t.Cleanup(watched.Close)

			if r := hangUpAfter(t, c.method, watched.URL+"/stream", "all the data"); r != 99 {
				t.Fatalf("r=%d, want 99 (1 reserved)", r)
			}
			waitLogged(t, g, 1)
			res := g.get(t, "/stream")
			io.Copy(io.Discard, res.Body)
			want := int64(59) // 100 - 40, 1 reserved
			if c.head != "" {
				want -= 1
			}
			if r := remaining(t, res, "usage"); r != want {
				t.Fatalf("r=%d after the client hung up on a cost of %s+40, want %d (1 reserved); the gateway logged:\n%s", r, c.head, want, g.logs.String())
			}
		})
	}
}

// An upstream that does not send its trailer within the pool's response
// timeout, once the client has left, charges max_cost.
func TestACostTrailerThatNeverComesChargesMaxCost(t *testing.T) {
	up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Usage-Cost")
		io.WriteString(w, "first part ")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the gateway gave up: no trailer
	})
	rt, pool := trailerRoute(up, 200*time.Millisecond)
	g := newGateway(t, setup{routes: []proxy.Route{rt}, pools: []proxy.Pool{pool}})
	if r := hangUpAfter(t, "GET", g.URL+"/stream", "first part "); r != 99 {
		t.Fatalf("r=%d, want 99 (1 reserved)", r)
	}
	waitLogged(t, g, 1)
	if r := hangUpAfter(t, "GET", g.URL+"/stream", "first part "); r != 49 {
		t.Fatalf("r=%d after a trailer that never came, want 49 (max_cost 50 charged, 1 reserved)", r)
	}
}

// The gateway asks a route's upstream for trailers whatever the client
// said, when the route has a cost_header policy; otherwise as the client
// said.
func TestTheGatewayAsksForTrailersOnACostHeaderRoute(t *testing.T) {
	var te atomic.Value
	up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
		te.Store(r.Header.Get("Te"))
		w.Header().Set("X-Usage-Cost", "1")
	})
	rt, pool := trailerRoute(up, time.Minute)
	plain := route("plain", "/plain", up, nil, nil)
	g := newGateway(t, setup{routes: []proxy.Route{rt, plain}, pools: []proxy.Pool{pool}})
	for _, c := range []struct {
		name, path, clientTE, want string
	}{
		{"a client that sent no TE still has the upstream asked for trailers", "/stream", "", "trailers"},
		{"a client that asked for trailers has them asked for", "/stream", "trailers", "trailers"},
		{"a route without cost_header sends no TE the client did not", "/plain", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var headers []string
			if c.clientTE != "" {
				headers = []string{"TE", c.clientTE}
			}
			res := g.get(t, c.path, headers...)
			io.Copy(io.Discard, res.Body)
			if got := te.Load(); got != c.want {
				t.Fatalf("upstream saw TE %q, want %q", got, c.want)
			}
		})
	}
}

// Costs the upstream states several times, or beyond 64 bits: several
// fields (repeated lines, members of a comma-separated list, a header and
// a trailer) charge their sum, and any cost is clamped to max_cost (50).
func TestSeveralCostFieldsChargeTheirSumClampedToMaxCost(t *testing.T) {
	for _, c := range []struct {
		name    string
		head    []string // X-Usage-Cost lines of the head
		trailer []string // and of the trailer
		want    int64
	}{
		{"one cost charges it", []string{"7"}, nil, 7},
		{"a cost above max_cost charges max_cost", []string{"1000"}, nil, 50},
		{"a cost beyond 64 bits charges max_cost", []string{"99999999999999999999999"}, nil, 50},
		{"repeated header lines charge their sum", []string{"10", "15"}, nil, 25},
		{"a comma-separated list charges its sum", []string{"10, 15"}, nil, 25},
		{"a header and a trailer charge their sum", []string{"10"}, []string{"15"}, 25},
		{"repeated trailer lines charge their sum", nil, []string{"10", "15"}, 25},
		{"a sum above max_cost charges max_cost", []string{"30", "30"}, []string{"99999999999999999999999"}, 50},
		{"a malformed member charges 1", []string{"10, x"}, nil, 1},
		{"a negative member charges 1", []string{"10", "-3"}, nil, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
				for _, v := range c.head {
					w.Header().Add("X-Usage-Cost", v)
				}
				if c.trailer != nil {
					w.Header().Set("Trailer", "X-Usage-Cost")
				}
				io.WriteString(w, "data")
				w.(http.Flusher).Flush()
				w.Header().Del("X-Usage-Cost")
				for _, v := range c.trailer {
					w.Header().Add("X-Usage-Cost", v)
				}
			})
			rt, pool := trailerRoute(up, time.Minute)
			g := newGateway(t, setup{routes: []proxy.Route{rt}, pools: []proxy.Pool{pool}})
			// (Each call's r is after its own reserve of 1.)
			for i, want := range []int64{99, 99 - c.want} {
				res := g.get(t, "/stream")
				io.Copy(io.Discard, res.Body)
				if _, ok := res.Trailer["X-Usage-Cost"]; ok {
					t.Fatalf("call %d: the client saw the cost trailer", i+1)
				}
				if r := remaining(t, res, "usage"); r != want {
					t.Fatalf("call %d: r=%d, want %d", i+1, r, want)
				}
			}
		})
	}
}

// A response whose length its head gives can end with no trailer: its
// cost is the head's, and a client that leaves does not make the gateway
// read the rest of it.
func TestAClientThatHangsUpOnAResponseOfKnownLengthEndsTheExchange(t *testing.T) {
	gone := make(chan struct{})
	rest := make(chan error, 1)
	var once atomic.Bool
	up, _ := answering(t, func(w http.ResponseWriter, r *http.Request) {
		// The first part is more than the gateway buffers for its client
		// (a response of known length is not flushed write by write).
		first, body := "all the data"+strings.Repeat(".", 8<<10), make([]byte, 4<<20)
		w.Header().Set("Content-Length", strconv.Itoa(len(first)+len(body)))
		w.Header().Set("X-Usage-Cost", "2")
		io.WriteString(w, first)
		w.(http.Flusher).Flush()
		if once.CompareAndSwap(false, true) {
			<-gone
			_, err := w.Write(body)
			rest <- err
			return
		}
		w.Write(body)
	})
	rt, pool := trailerRoute(up, time.Minute)
	g := newGateway(t, setup{routes: []proxy.Route{rt}, pools: []proxy.Pool{pool}})
	var watching atomic.Bool
	watched := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if watching.CompareAndSwap(false, true) {
			context.AfterFunc(r.Context(), func() { close(gone) })
		}
		g.handler.ServeHTTP(w, r)
	}))
	t.Cleanup(watched.Close)
	if r := hangUpAfter(t, "GET", watched.URL+"/stream", "all the data"); r != 99 {
		t.Fatalf("r=%d, want 99 (1 reserved)", r)
	}
	select {
	case err := <-rest:
		if err == nil {
			t.Fatal("the gateway read 4 MiB after its client left, from a response that can carry no trailer")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream still writes")
	}
	waitLogged(t, g, 1)
	res := g.get(t, "/stream")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if r := remaining(t, res, "usage"); r != 97 {
		t.Fatalf("r=%d, want 97: the head's cost of 2 charged, 1 reserved", r)
	}
}
