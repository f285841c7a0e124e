package edge

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sync"
)

// connectionCaps are a public listener's limits on open connections.
type connectionCaps struct {
	total     int // 0: no cap
	perClient int // 0: no cap
	// ipv6Bits is the prefix that makes one IPv6 client, as for the
	// client-IP subject: a host is handed a /64, not an address.
	ipv6Bits int
	// exempt are the trusted proxies, whose connections carry many
	// clients: perClient does not apply to them.
	exempt []netip.Prefix
	logger *slog.Logger
}

// connCounter holds a listener's open connections to its caps: a slot of
// the total for each (acquire waits for one, reserve does not), and at
// most perClient of one client. The TCP listeners (limitListener) and the
// QUIC one (quicPlace) count through it, so a cap means the same on both.
type connCounter struct {
	caps      connectionCaps
	sem       chan struct{} // nil: no total cap
	done      chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	clients map[netip.Prefix]int // nil: no per-client cap
	// unproven counts, by client, QUIC handshakes in flight from an
	// address not proven yet. They hold no place, since the address may be
	// spoofed and must not refuse its owner; they only count in crowded.
	unproven map[netip.Prefix]int
	// refusals spaces the log lines about refused connections, all of
	// one key, so that a flood of them cannot flood the log. The lines
	// never name the client.
	refusals LogThrottle[struct{}]
}

// newConnCounter is nil when caps caps nothing.
func newConnCounter(caps connectionCaps) *connCounter {
	if caps.total <= 0 && caps.perClient <= 0 {
		return nil
	}
	c := &connCounter{caps: caps, done: make(chan struct{})}
	if caps.total > 0 {
		c.sem = make(chan struct{}, caps.total)
	}
	if caps.perClient > 0 {
		c.clients = map[netip.Prefix]int{}
		c.unproven = map[netip.Prefix]int{}
	}
	return c
}

// acquire waits for a slot of the total cap; false once ctx ends or the
// counter is stopped.
func (c *connCounter) acquire(ctx context.Context) bool {
	if c.sem == nil {
		return true
	}
	select {
	case c.sem <- struct{}{}:
		return true
	case <-c.done:
	case <-ctx.Done():
	}
	return false
}

func (c *connCounter) releaseSlot() {
	if c.sem != nil {
		<-c.sem
	}
}

// stop ends every acquire waiting and to come.
func (c *connCounter) stop() { c.closeOnce.Do(func() { close(c.done) }) }

// connSlot is what one connection holds of its client's count: a place
// (admit), or an unproven handshake (expect).
type connSlot struct {
	client  netip.Prefix
	counted bool // client is counted
}

// admit counts a connection from peer, which already holds a slot of the
// total, or refuses it at its client's cap (and gives the slot back).
func (c *connCounter) admit(peer net.Addr) (connSlot, bool) {
	if c.clients == nil {
		return connSlot{}, true
	}
	key, ok := clientKey(peer, c.caps.ipv6Bits, c.caps.exempt)
	if !ok {
		return connSlot{}, true
	}
	c.mu.Lock()
	admitted := c.clients[key] < c.caps.perClient
	if admitted {
		c.clients[key]++
	}
	c.mu.Unlock()
	if !admitted {
		c.releaseSlot()
		c.logRefusal()
		return connSlot{}, false
	}
	return connSlot{client: key, counted: true}, true
}

// logRefusal logs a connection refused at its client's cap, at most once
// a second.
func (c *connCounter) logRefusal() {
	if log, skipped := c.refusals.Admit(struct{}{}); log {
		c.caps.logger.Warn("connections refused: a client holds max_connections_per_client", "refused", skipped+1, "max_connections_per_client", c.caps.perClient)
	}
}

// reserve is acquire and admit that never wait: a free slot of the total
// and a place of peer's client, or nothing, refused at either cap.
func (c *connCounter) reserve(peer net.Addr) (connSlot, bool) {
	if c.sem != nil {
		select {
		case c.sem <- struct{}{}:
		default:
			return connSlot{}, false
		}
	}
	return c.admit(peer)
}

// expect counts a handshake from peer, whose address is not proven, in
// unproven until forget.
func (c *connCounter) expect(peer net.Addr) connSlot {
	if c.clients == nil {
		return connSlot{}
	}
	key, ok := clientKey(peer, c.caps.ipv6Bits, c.caps.exempt)
	if !ok {
		return connSlot{}
	}
	c.mu.Lock()
	c.unproven[key]++
	c.mu.Unlock()
	return connSlot{client: key, counted: true}
}

func (c *connCounter) forget(s connSlot) {
	if s.counted {
		c.mu.Lock()
		takeOne(c.unproven, s.client)
		c.mu.Unlock()
	}
}

// takeOne takes one from client's count in counts, which forgets a count
// of none; c.mu is held.
func takeOne(counts map[netip.Prefix]int, client netip.Prefix) {
	if n := counts[client]; n <= 1 {
		delete(counts, client)
	} else {
		counts[client] = n - 1
	}
}

// crowded reports whether reserve would refuse peer if each unproven
// handshake (unprovenTotal in all) held a place.
func (c *connCounter) crowded(peer net.Addr, unprovenTotal int64) bool {
	if c.sem != nil && int64(len(c.sem))+unprovenTotal >= int64(cap(c.sem)) {
		return true
	}
	if c.clients == nil {
		return false
	}
	key, ok := clientKey(peer, c.caps.ipv6Bits, c.caps.exempt)
	if !ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clients[key]+c.unproven[key] >= c.caps.perClient
}

// release gives back what admit counted, and the slot.
func (c *connCounter) release(s connSlot) {
	if s.counted {
		c.mu.Lock()
		takeOne(c.clients, s.client)
		c.mu.Unlock()
	}
	c.releaseSlot()
}

// limitConnections accepts at most caps.total connections at once; the
// next waits in the kernel's backlog until one closes. It keeps a flood of
// idle or slow connections from exhausting file descriptors and memory,
// which per-request limits cannot do: those only see requests that
// finished their headers. Of those, one client (a peer address, an IPv6
// prefix) holds at most caps.perClient: its next connection is closed as
// soon as it is accepted, before a byte is read, so one address cannot take
// every slot. A connection holds its place until it is closed, hijacked
// (an upgraded tunnel) or not.
func limitConnections(l net.Listener, caps connectionCaps) net.Listener {
	c := newConnCounter(caps)
	if c == nil {
		return l
	}
	return &limitListener{Listener: l, counter: c}
}

type limitListener struct {
	net.Listener
	counter *connCounter
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		if !l.counter.acquire(context.Background()) {
			return nil, net.ErrClosed
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.counter.releaseSlot()
			return nil, err
		}
		slot, ok := l.counter.admit(c.RemoteAddr())
		if !ok {
			c.Close()
			continue
		}
		return &limitConn{Conn: c, counter: l.counter, slot: slot}, nil
	}
}

func (l *limitListener) Close() error {
	l.counter.stop()
	return l.Listener.Close()
}

// clientKey is the client a peer address counts as: an IPv4 address, or
// the IPv6 prefix of ipv6Bits bits; none for a peer in exempt. TCP and UDP
// peers count alike.
func clientKey(a net.Addr, ipv6Bits int, exempt []netip.Prefix) (netip.Prefix, bool) {
	var ap netip.AddrPort
	switch a := a.(type) {
	case *net.TCPAddr:
		ap = a.AddrPort()
	case *net.UDPAddr:
		ap = a.AddrPort()
	default:
		return netip.Prefix{}, false
	}
	ip := ap.Addr().Unmap()
	for _, p := range exempt {
		if p.Contains(ip) {
			return netip.Prefix{}, false
		}
	}
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32), true
	}
	p, err := ip.WithZone("").Prefix(ipv6Bits)
	return p, err == nil
}

type limitConn struct {
	net.Conn
	counter *connCounter
	slot    connSlot
	once    sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.counter.release(c.slot) })
	return err
}
