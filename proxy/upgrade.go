package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTunnelIdleTimeout closes an upgraded connection that carried no
// byte either way for this long.
const DefaultTunnelIdleTimeout = 5 * time.Minute

// errUnrequestedUpgrade is an upstream's 101 to a request the gateway did
// not forward as an upgrade: it would open a tunnel past the limiter.
var errUnrequestedUpgrade = errors.New("proxy: the upstream switched protocols on a request that was not forwarded as an upgrade")

// upgradeAllowed reports whether every protocol an Upgrade header value
// asks for is one the route lists. The names are compared without their
// versions ("websocket" allows "WebSocket/13"); h2c is never allowed, since
// an HTTP/2 connection past the gateway would carry requests it never sees.
func upgradeAllowed(allowed []string, value string) bool {
	if len(allowed) == 0 {
		return false
	}
	named := false
	for p := range strings.SplitSeq(value, ",") {
		name, _, _ := strings.Cut(strings.TrimSpace(p), "/")
		if name == "" {
			continue
		}
		name = strings.ToLower(name)
		if name == "h2c" || !slices.Contains(allowed, name) {
			return false
		}
		named = true
	}
	return named
}

// restrictUpgrade runs in Rewrite, after ReverseProxy has removed the
// client's hop-by-hop headers and put back Connection and Upgrade for an
// upgrade request. An upgrade the route does not list goes upstream as a
// plain request. HTTP2-Settings only ever serves an h2c upgrade, which is
// never forwarded.
func restrictUpgrade(out http.Header, allowed []string) {
	delete(out, "Http2-Settings")
	if up, ok := out["Upgrade"]; ok && !upgradeAllowed(allowed, strings.Join(up, ",")) {
		delete(out, "Upgrade")
		delete(out, "Connection")
	}
}

// tunnelSettings are what a route needs to open tunnels: the idle timeout
// of the configuration, and the Handler's set of open tunnels.
type tunnelSettings struct {
	idle time.Duration
	open *openTunnels
}

// openTunnels are the tunnels open now, so that Handler.Close can end them:
// the server forgot their connections when ReverseProxy hijacked them.
type openTunnels struct {
	mu     sync.Mutex
	set    map[*tunnel]struct{}
	closed bool // after closeAll: a tunnel opened now is closed at once
}

func newOpenTunnels() *openTunnels { return &openTunnels{set: map[*tunnel]struct{}{}} }

func (o *openTunnels) add(t *tunnel) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return false
	}
	o.set[t] = struct{}{}
	return true
}

func (o *openTunnels) remove(t *tunnel) {
	o.mu.Lock()
	delete(o.set, t)
	o.mu.Unlock()
}

func (o *openTunnels) closeAll() {
	o.mu.Lock()
	o.closed = true
	set := o.set
	o.set = map[*tunnel]struct{}{}
	o.mu.Unlock()
	for t := range set {
		t.Close()
	}
}

// checkSwitch is ModifyResponse for a 101: only a request forwarded as an
// allowed upgrade may switch protocols. The tunnel it opens is timed and
// closed on the client's side (capture.onHijack): that is the side a stuck
// copy blocks on.
func checkSwitch(res *http.Response, allowed []string) error {
	up := res.Request.Header.Get("Upgrade")
	if up == "" || !upgradeAllowed(allowed, up) {
		return errUnrequestedUpgrade
	}
	if _, ok := res.Body.(io.ReadWriteCloser); !ok {
		return errUnrequestedUpgrade
	}
	return nil
}

// tunnel is the client side of an upgraded connection. ReverseProxy copies
// it to the upstream and the upstream to it with no timeout of its own,
// and ends both copies (closing the upstream side) once either fails.
// tunnel closes the client's connection once no byte went either way for
// idle: a write the client does not read for that long counts as quiet, so
// a client that stops reading cannot hold its tunnel, the copies'
// goroutines and its place under the listener's connection caps. Every byte
// the upstream sends the client passes through Write, and every byte the
// client sends through Read.
type tunnel struct {
	net.Conn
	idle    time.Duration
	open    *openTunnels
	start   time.Time
	last    atomic.Int64 // nanoseconds after start of the last byte either way
	written atomic.Int64 // bytes written to the client

	mu     sync.Mutex
	timer  *time.Timer
	closed bool
}

// newTunnel times client and adds it to the open tunnels; when those are
// closed already (the Handler is closing), it closes client at once.
func newTunnel(client net.Conn, s tunnelSettings) *tunnel {
	t := &tunnel{Conn: client, idle: s.idle, open: s.open, start: time.Now()}
	t.mu.Lock()
	t.timer = time.AfterFunc(s.idle, t.check)
	t.mu.Unlock()
	if !s.open.add(t) {
		t.Close()
	}
	return t
}

func (t *tunnel) touch() { t.last.Store(int64(time.Since(t.start))) }

func (t *tunnel) Read(p []byte) (int, error) {
	n, err := t.Conn.Read(p)
	if n > 0 {
		t.touch()
	}
	return n, err
}

func (t *tunnel) Write(p []byte) (int, error) {
	n, err := t.Conn.Write(p)
	if n > 0 {
		t.written.Add(int64(n))
		t.touch()
	}
	return n, err
}

func (t *tunnel) check() {
	quiet := time.Since(t.start) - time.Duration(t.last.Load())
	if quiet >= t.idle {
		t.Close()
		return
	}
	t.mu.Lock()
	if !t.closed {
		t.timer.Reset(t.idle - quiet)
	}
	t.mu.Unlock()
}

// Close closes the client's connection, which unblocks a copy stuck on
// it either way.
func (t *tunnel) Close() error {
	t.mu.Lock()
	t.closed = true
	t.timer.Stop()
	t.mu.Unlock()
	t.open.remove(t)
	return t.Conn.Close()
}
