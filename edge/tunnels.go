package edge

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// tunnels are a public listener's hijacked connections (upgraded tunnels).
// http.Server forgets a connection once a handler hijacks it, so neither its
// Shutdown nor its Close would end one; Servers.Shutdown does, through this
// set. A tunnel keeps its place under the connection caps until it closes:
// the caps count at the listener, below the hijack.
type tunnels struct {
	mu     sync.Mutex
	open   map[*framingConn]struct{}
	closed bool // after closeAll: a connection hijacked now is closed at once
}

func newTunnels() *tunnels { return &tunnels{open: map[*framingConn]struct{}{}} }

// connState is the servers' ConnState hook: it adds each hijacked
// connection. Every HTTP/1 connection of a public listener is a
// framingConn; HTTP/2 connections are never hijacked.
func (t *tunnels) connState(c net.Conn, state http.ConnState) {
	if state != http.StateHijacked {
		return
	}
	fc, ok := c.(*framingConn)
	if !ok {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		fc.Conn.Close()
		return
	}
	t.open[fc] = struct{}{}
	fc.tunnels = t
	t.mu.Unlock()
}

func (t *tunnels) remove(fc *framingConn) {
	t.mu.Lock()
	delete(t.open, fc)
	t.mu.Unlock()
}

func (t *tunnels) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.open)
}

// wait returns true once no tunnel is open, false when ctx ends first.
func (t *tunnels) wait(ctx context.Context) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for t.count() > 0 {
		select {
		case <-ctx.Done():
			return t.count() == 0
		case <-tick.C:
		}
	}
	return true
}

// closeAll closes every open tunnel and any hijacked later, and reports
// how many it closed.
func (t *tunnels) closeAll() int {
	t.mu.Lock()
	t.closed = true
	open := t.open
	t.open = map[*framingConn]struct{}{}
	t.mu.Unlock()
	for fc := range open {
		fc.Conn.Close()
	}
	return len(open)
}
