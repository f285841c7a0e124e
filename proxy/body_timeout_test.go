package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/proxy"
)

// A client that stops sending its body gets 408 once
// body_read_timeout passes, its connection closes, and the upstream's
// connection is let go; on a route charged by a cost header too, whose
// exchange with the upstream outlives a client that left.
func TestASlowBodyTimesOut(t *testing.T) {
	t.Run("a route", func(t *testing.T) {
		testASlowBodyTimesOut(t, func(up *upstream) ([]proxy.Route, []proxy.Pool) {
			return []proxy.Route{route("r", "/", up, t, nil)}, nil
		})
	})
	t.Run("a cost_header route", func(t *testing.T) {
		testASlowBodyTimesOut(t, func(up *upstream) ([]proxy.Route, []proxy.Pool) {
			rt, pool := trailerRoute(up, time.Minute)
			rt.Path = "/"
			return []proxy.Route{rt}, []proxy.Pool{pool}
		})
	})
}

func testASlowBodyTimesOut(t *testing.T, routes func(*upstream) ([]proxy.Route, []proxy.Pool)) {
	up := newUpstream(t)
	upstreamDone := make(chan error, 1)
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		upstreamDone <- err
	})
	const timeout = 300 * time.Millisecond
	rts, pools := routes(up)
	g := newGateway(t, setup{routes: rts, pools: pools, bodyRead: timeout})
	start := time.Now()
	c, br, res := dialGateway(t, g, "POST /upload HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 100\r\n\r\nfirst bytes")
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body-timeout") {
		t.Fatalf("%d %s, want 408 body-timeout", res.StatusCode, body)
	}
	if took := time.Since(start); took < timeout {
		t.Fatalf("answered after %v, before the timeout", took)
	}
	if !res.Close {
		t.Error("the 408 does not say Connection: close")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("the connection stayed open: %v", err)
	}
	c.Close()
	select {
	case err := <-upstreamDone:
		if err == nil {
			t.Fatal("the upstream read a complete body")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream still waits for the body")
	}
}

// A body that keeps coming, each byte within the timeout, is forwarded
// whole however long it takes altogether, and so is an upstream that
// answers slower than the timeout once the body is in.
func TestABodyThatKeepsComingIsForwarded(t *testing.T) {
	// The pauses between chunks are a fifth of the timeout: a busy
	// machine's scheduling stays well inside it.
	const timeout = time.Second
	up := newUpstream(t)
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(500)
			return
		}
		time.Sleep(2 * timeout) // slower than the timeout, once the body is in
		w.Write(b)
	})
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, nil)}, bodyRead: timeout})
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 6; i++ {
			pw.Write([]byte("chunk"))
			time.Sleep(timeout / 5)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", g.URL+"/upload", pr)
	res := do(t, req)
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 || string(body) != strings.Repeat("chunk", 6) {
		t.Fatalf("%d %q", res.StatusCode, body)
	}
}

// Over HTTP/2 the stream, not the connection, waits for the body: the
// client still gets 408.
func TestASlowBodyTimesOutOverHTTP2(t *testing.T) {
	up := newUpstream(t)
	up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	g := newGateway(t, setup{routes: []proxy.Route{route("r", "/", up, t, nil)}, bodyRead: 300 * time.Millisecond})
	s := httptest.NewUnstartedServer(g.Config.Handler)
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go pw.Write([]byte("first bytes"))
	req, _ := http.NewRequest("POST", s.URL+"/upload", pr)
	res, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.ProtoMajor != 2 || res.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "body-timeout") {
		t.Fatalf("%s %d %s, want HTTP/2 408 body-timeout", res.Proto, res.StatusCode, body)
	}
}
