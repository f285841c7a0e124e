package edge

import (
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
	if caps.total <= 0 && caps.perClient <= 0 {
		return l
	}
	ll := &limitListener{Listener: l, caps: caps, done: make(chan struct{})}
	if caps.total > 0 {
		ll.sem = make(chan struct{}, caps.total)
	}
	if caps.perClient > 0 {
		ll.clients = map[netip.Prefix]int{}
	}
	return ll
}

type limitListener struct {
	net.Listener
	caps      connectionCaps
	sem       chan struct{} // nil: no total cap
	done      chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	clients map[netip.Prefix]int // nil: no per-client cap
	// refusals spaces the log lines about refused connections, all of
	// one key, so that a flood of them cannot flood the log. The lines
	// never name the client.
	refusals LogThrottle[struct{}]
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		if l.sem != nil {
			select {
			case l.sem <- struct{}{}:
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			l.releaseSlot()
			return nil, err
		}
		lc := &limitConn{Conn: c, l: l}
		if l.clients != nil {
			key, ok := clientKey(c.RemoteAddr(), l.caps.ipv6Bits, l.caps.exempt)
			if ok && !l.admit(key) {
				c.Close()
				l.releaseSlot()
				continue
			}
			lc.client, lc.counted = key, ok
		}
		return lc, nil
	}
}

// admit counts a connection of client, or refuses it at the cap.
func (l *limitListener) admit(client netip.Prefix) bool {
	l.mu.Lock()
	admitted := l.clients[client] < l.caps.perClient
	if admitted {
		l.clients[client]++
	}
	l.mu.Unlock()
	if !admitted {
		if log, skipped := l.refusals.Admit(struct{}{}); log {
			l.caps.logger.Warn("connections refused: a client holds max_connections_per_client", "refused", skipped+1, "max_connections_per_client", l.caps.perClient)
		}
	}
	return admitted
}

func (l *limitListener) releaseSlot() {
	if l.sem != nil {
		<-l.sem
	}
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// clientKey is the client a peer address counts as: an IPv4 address, or
// the IPv6 prefix of ipv6Bits bits; none for a peer in exempt.
func clientKey(a net.Addr, ipv6Bits int, exempt []netip.Prefix) (netip.Prefix, bool) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}, false
	}
	ip := tcp.AddrPort().Addr().Unmap()
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
	l       *limitListener
	client  netip.Prefix
	counted bool // client is counted in l.clients
	once    sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

func (c *limitConn) release() {
	if c.counted {
		c.l.mu.Lock()
		if n := c.l.clients[c.client]; n <= 1 {
			delete(c.l.clients, c.client)
		} else {
			c.l.clients[c.client] = n - 1
		}
		c.l.mu.Unlock()
	}
	c.l.releaseSlot()
}
