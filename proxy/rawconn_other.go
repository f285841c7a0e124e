//go:build !unix

package proxy

import "net"

// leanSupported: without a read that does not wait, an idle connection
// the upstream closed cannot be told from a live one before a request is
// written to it, so the standard Transport carries every request.
const leanSupported = false

type rawConn struct{}

func (c *leanConn) initRaw(net.Conn) {}

func (c *leanConn) usable() bool { return false }

// sendRead sends c.out, the request, and reads the first bytes of its
// answer into p.
func (c *leanConn) sendRead(p []byte) (int, error) {
	out := c.out
	c.out = nil
	return c.writeThenRead(out, p)
}
