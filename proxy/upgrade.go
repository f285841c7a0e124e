package proxy

import (
	"errors"
	"io"
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

// tunnelSettings are what a forwarder needs to open tunnels: the idle
// timeout of the configuration, and the Handler's set of open tunnels.
type tunnelSettings struct {
	idle time.Duration
	open *openTunnels
}

// openTunnels are the upstream sides of the tunnels open now, so that
// Handler.Close can end them: the server forgot their client sides when
// ReverseProxy hijacked them.
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
// allowed upgrade may switch protocols, and the tunnel it opens closes
// after the idle timeout of quiet, or when the Handler closes.
func checkSwitch(res *http.Response, allowed []string, tunnels tunnelSettings) error {
	up := res.Request.Header.Get("Upgrade")
	if up == "" || !upgradeAllowed(allowed, up) {
		return errUnrequestedUpgrade
	}
	backend, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		return errUnrequestedUpgrade
	}
	t := newTunnel(backend, tunnels.idle, tunnels.open)
	if !tunnels.open.add(t) {
		t.Close()
	}
	res.Body = t
	return nil
}

// tunnel is the upstream side of an upgraded connection. ReverseProxy
// copies it to the client and the client to it with no timeout of its own;
// tunnel closes it once no byte went either way for idle, which ends the
// copy in both directions and closes the client's connection (and frees its
// place under the listener's connection caps).
type tunnel struct {
	io.ReadWriteCloser
	idle  time.Duration
	open  *openTunnels
	start time.Time
	last  atomic.Int64 // nanoseconds after start of the last byte either way

	mu     sync.Mutex
	timer  *time.Timer
	closed bool
}

func newTunnel(backend io.ReadWriteCloser, idle time.Duration, open *openTunnels) *tunnel {
	t := &tunnel{ReadWriteCloser: backend, idle: idle, open: open, start: time.Now()}
	t.mu.Lock()
	t.timer = time.AfterFunc(idle, t.check)
	t.mu.Unlock()
	return t
}

func (t *tunnel) touch() { t.last.Store(int64(time.Since(t.start))) }

func (t *tunnel) Read(p []byte) (int, error) {
	n, err := t.ReadWriteCloser.Read(p)
	if n > 0 {
		t.touch()
	}
	return n, err
}

func (t *tunnel) Write(p []byte) (int, error) {
	n, err := t.ReadWriteCloser.Write(p)
	if n > 0 {
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

func (t *tunnel) Close() error {
	t.mu.Lock()
	t.closed = true
	t.timer.Stop()
	t.mu.Unlock()
	t.open.remove(t)
	return t.ReadWriteCloser.Close()
}
