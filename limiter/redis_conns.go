package limiter

import (
	"context"
	"errors"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// A node whose breaker opened may leave connections in its client's pool
// that will never answer again: one that a partition, a middlebox or a
// lost NAT entry swallowed, or one the pool dialed during the fault for a
// call that had stopped waiting. Such a connection looks healthy while it
// idles. Were the probe that ends the cooldown to draw one, it would wait
// out its deadline and reopen the breaker for another cooldown, once for
// each such connection, long after the node answers again.
//
// So every connection a node's client dials is marked with the number of
// times the node's breaker had opened when the dial began (not counting
// an open whose cooldown runs: a call queued before the breaker opened
// may dial during it, into the fault), and once the breaker has opened
// since, the pool drops the connection when it next takes it from its
// idle list: go-redis checks an idle connection through its syscall.Conn
// before handing it out, and a stale one fails that check. Calls after a
// cooldown thus run on connections dialed after it ended.

// errConnStale fails the pool's check of a connection dialed before its
// node's breaker last opened.
var errConnStale = errors.New("redis: connection dialed before the circuit breaker opened")

// staleConns is the hook that marks the connections of one node's client.
type staleConns struct {
	r *Redis
	c *redis.Client
}

// markConns adds the hook to c, unless the breakers are off.
func (r *Redis) markConns(c *redis.Client) {
	if !r.breakers.Disabled {
		c.AddHook(staleConns{r: r, c: c})
	}
}

func (h staleConns) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n, err := h.r.nodeState(h.c)
		if err != nil || n.breaker == nil {
			return next(ctx, network, addr)
		}
		opens := n.breaker.dialMark()
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &markedConn{Conn: conn, b: n.breaker, opens: opens}, nil
	}
}

func (staleConns) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (staleConns) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// markedConn is a connection with its breaker's dialMark when it was
// dialed.
type markedConn struct {
	net.Conn
	b     *breaker
	opens uint64
}

// SyscallConn is the pool's way to check an idle connection: it fails for
// a stale one. Otherwise it is the socket's, for a plain TCP connection;
// a TLS one, whose socket the pool does not read, passes unread as it
// would unwrapped.
func (c *markedConn) SyscallConn() (syscall.RawConn, error) {
	if c.b.opens.Load() != c.opens {
		return nil, errConnStale
	}
	if s, ok := c.Conn.(syscall.Conn); ok {
		return s.SyscallConn()
	}
	return uncheckedConn{}, nil
}

// uncheckedConn lets the pool's check pass without reading: a connection
// the check would not look into unwrapped.
type uncheckedConn struct{}

func (uncheckedConn) Control(func(fd uintptr)) error           { return nil }
func (uncheckedConn) Read(func(fd uintptr) (done bool)) error  { return nil }
func (uncheckedConn) Write(func(fd uintptr) (done bool)) error { return nil }
