package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/edgegate/gateway/proxy"
)

// A response cut off mid-body makes ReverseProxy abort the handler with a
// panic (http.ErrAbortHandler). The target's count of requests in flight
// must still come down, or least_requests shuns it for good, and the
// request is still in the access log, marked aborted.
func TestATargetThatCutsAResponseShortIsNotCountedBusyForever(t *testing.T) {
	var aborted atomic.Bool
	target := func(name string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Target", name)
			if name == "a" && r.URL.Query().Get("cut") != "" {
				// Promise 100 bytes, send 5, and close.
				w.Header().Set("Content-Length", "100")
				w.WriteHeader(http.StatusOK)
				w.Write([]byte("short"))
				w.(http.Flusher).Flush()
				c, _, err := http.NewResponseController(w).Hijack()
				if err == nil {
					c.Close()
				}
				aborted.Store(true)
			}
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b := target("a"), target("b")
	g := newPoolGateway(t, proxy.Pool{Name: "legacy", Targets: []string{a.URL, b.URL}, Balance: proxy.LeastRequests})
	for i := 0; !aborted.Load(); i++ {
		if i == 200 {
			t.Fatal("200 requests and none reached a")
		}
		res, err := http.Get(g.URL + "/orders?cut=1")
		if err != nil {
			continue // a's cut response
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	sent := 0
	for _, line := range strings.Split(g.logs.String(), "\n") {
		if strings.Contains(line, `"aborted":true`) && strings.Contains(line, a.URL) {
			sent++
		}
	}
	// The client may have sent it again on a fresh connection (nothing of
	// the response had reached it), and a cut it again.
	if sent == 0 {
		t.Errorf("the access log has no line for the cut response:\n%s", g.logs.String())
	}
	seen := map[string]int{}
	for range 40 {
		res, err := http.Get(g.URL + "/orders")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		seen[res.Header.Get("X-Target")]++
	}
	if seen["a"] == 0 {
		t.Fatalf("after one cut response, 40 requests went to %v: a still counts a request in flight", seen)
	}
}
