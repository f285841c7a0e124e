package proxy_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// rawUpstream is a TCP server that reads one request head per connection,
// records it, and answers with reply, then hands the connection to after
// (nil: close it). It plays the lax backends no Go server imitates.
type rawUpstream struct {
	ln    net.Listener
	mu    sync.Mutex
	heads []http.Header
}

func newRawUpstream(t *testing.T, reply string, after func(net.Conn, *bufio.Reader)) *rawUpstream {
	t.Helper()
	u := &rawUpstream{}
	u.ln = serveRaw(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		u.mu.Lock()
		u.heads = append(u.heads, req.Header)
		u.mu.Unlock()
		io.WriteString(c, reply)
		if after != nil {
			after(c, br)
		}
	})
	return u
}

// serveRaw listens on a loopback port and hands each connection to serve,
// closing it after; the test's cleanup closes the listener and waits.
func serveRaw(t *testing.T, serve func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	return ln
}

func (u *rawUpstream) url() string { return "http://" + u.ln.Addr().String() }

func (u *rawUpstream) head(t *testing.T) http.Header {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.heads) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	return u.heads[len(u.heads)-1]
}

func rawRoute(u *rawUpstream, upgrades ...string) proxy.Route {
	return proxy.Route{OperationID: "r", Path: "/", Upstream: u.url(), Subject: []subject.Kind{subject.ClientIP}, Cost: 1, Upgrades: upgrades}
}

// dialGateway sends head on a new connection and reads the response head.
func dialGateway(t *testing.T, g *gateway, head string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", g.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, br, res
}

const h2cUpgrade = "GET / HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n"

// An upstream that takes h2c (with or without
// HTTP2-Settings) must never get a tunnel past the limiter.
func TestAnH2CUpgradeNeverOpensATunnel(t *testing.T) {
	for _, c := range []struct {
		name     string
		upgrades []string
	}{
		{"on a route that lists no upgrade", nil},
		{"on a route that lists websocket", []string{"websocket"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := newRawUpstream(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", nil)
			g := newGateway(t, setup{routes: []proxy.Route{rawRoute(up, c.upgrades...)}})
			_, _, res := dialGateway(t, g, h2cUpgrade)
			if res.StatusCode == http.StatusSwitchingProtocols {
				t.Fatal("the gateway switched to h2c")
			}
			if res.StatusCode != http.StatusBadGateway {
				t.Fatalf("status %d, want 502 for a 101 nobody asked for", res.StatusCode)
			}
			h := up.head(t)
			for _, name := range []string{"Upgrade", "Http2-Settings"} {
				if v, ok := h[name]; ok {
					t.Errorf("%s reached the upstream: %q", name, v)
				}
			}
			if strings.Contains(strings.ToLower(strings.Join(h["Connection"], ",")), "upgrade") {
				t.Errorf("Connection: upgrade reached the upstream: %q", h["Connection"])
			}
		})
	}
}

func TestAnUpgradeTheRouteDoesNotListGoesUpstreamAsAPlainRequest(t *testing.T) {
	up := newRawUpstream(t, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", nil)
	g := newGateway(t, setup{routes: []proxy.Route{rawRoute(up, "websocket")}})
	_, _, res := dialGateway(t, g, "GET / HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade, X-Foo\r\nUpgrade: foo\r\nX-Foo: bar\r\n\r\n")
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	h := up.head(t)
	if _, ok := h["Upgrade"]; ok {
		t.Errorf("Upgrade reached the upstream: %v", h)
	}
	if _, ok := h["X-Foo"]; ok {
		t.Errorf("a header the client's Connection named reached the upstream: %v", h)
	}
}

// A route that lists websocket tunnels it; the tunnel closes once it has
// been quiet for tunnel_idle_timeout.
func TestAListedUpgradeTunnelsAndClosesWhenIdle(t *testing.T) {
	echo := func(c net.Conn, br *bufio.Reader) {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(c, "echo: "+line)
		}
	}
	up := newRawUpstream(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", echo)
	const idle = 600 * time.Millisecond
	g := newGateway(t, setup{routes: []proxy.Route{rawRoute(up, "websocket")}, tunnelIdle: idle})
	c, br, res := dialGateway(t, g, "GET /chat HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: WebSocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", res.StatusCode)
	}
	// Traffic in steps shorter than the timeout keeps the tunnel open past
	// it. (The pauses are the quiet between messages, well inside the
	// timeout even on a busy machine.)
	opened := time.Now()
	var lastSent time.Time
	for i := 0; time.Since(opened) < idle+idle/2; i++ {
		lastSent = time.Now()
		io.WriteString(c, "ping\n")
		if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
			t.Fatalf("round %d, %v after the upgrade: %q %v", i, time.Since(opened), line, err)
		}
		time.Sleep(idle / 6)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("read on an idle tunnel: %v, want EOF", err)
	}
	// The tunnel saw its last traffic no earlier than the last ping left.
	if took := time.Since(lastSent); took < idle {
		t.Fatalf("closed %v after the last traffic, before the idle timeout (%v)", took, idle)
	}
}

// A 101 is logged and counted as 101, with the bytes
// the upstream sent through the tunnel, not as a 200 of 0 bytes.
func TestATunnelIsLoggedAndCountedAs101(t *testing.T) {
	echo := func(c net.Conn, br *bufio.Reader) {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		io.WriteString(c, "echo: "+line)
	}
	up := newRawUpstream(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", echo)
	reg := prometheus.NewRegistry()
	m := proxy.NewMetrics(reg)
	g := newGateway(t, setup{routes: []proxy.Route{rawRoute(up, "websocket")}, metrics: m})
	c, br, res := dialGateway(t, g, "GET /chat HTTP/1.1\r\nHost: gw.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	if res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d, want 101", res.StatusCode)
	}
	io.WriteString(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo: ping\n" {
		t.Fatalf("through the tunnel: %q %v", line, err)
	}
	// The upstream closed after its echo: the tunnel ends.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the upstream closed: %v, want EOF", err)
	}
	c.Close()
	var rec struct {
		Status int
		Bytes  int64
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		for line := range strings.Lines(g.logs.String()) {
			if strings.Contains(line, `"msg":"request"`) {
				json.Unmarshal([]byte(line), &rec)
			}
		}
		if rec.Status != 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rec.Status != http.StatusSwitchingProtocols || rec.Bytes != int64(len("echo: ping\n")) {
		t.Errorf("logged status %d with %d bytes, want 101 with %d:\n%s", rec.Status, rec.Bytes, len("echo: ping\n"), g.logs.String())
	}
	if n := testutil.ToFloat64(m.Requests.WithLabelValues("r", "unlimited", "101", "none")); n != 1 {
		t.Errorf("gateway_requests_total{status=\"101\"} = %v, want 1", n)
	}
}
