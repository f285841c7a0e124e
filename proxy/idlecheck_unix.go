//go:build unix

package proxy

import (
	"net"
	"syscall"
)

// leanSupported: the idle check below can be made.
const leanSupported = true

// idleCheck tells whether an idle connection can carry a request: the
// upstream has not closed it (an upstream's keep-alive timeout is often
// shorter than ours) and has sent nothing unasked. The standard Transport
// learns that from a read it keeps waiting on every connection; here it
// is one read that does not wait, when the connection is taken.
type idleCheck struct {
	raw   syscall.RawConn // nil: not a socket; taken as usable
	read  func(fd uintptr) bool
	alive bool
	buf   [1]byte
}

func (c *leanConn) initIdleCheck(nc net.Conn) {
	if sc, ok := nc.(syscall.Conn); ok {
		c.idleCheck.raw, _ = sc.SyscallConn()
	}
	c.idleCheck.read = c.readIdle
}

// usable makes the idle check. A byte read is lost, which does not
// matter: a connection that had one is closed.
func (c *leanConn) usable() bool {
	if c.raw == nil {
		return true
	}
	c.alive = false
	if err := c.raw.Read(c.read); err != nil {
		return false
	}
	return c.alive
}

// readIdle reads without waiting (Go's sockets do not block): nothing to
// read is a live connection; end of file or a byte is not.
func (c *leanConn) readIdle(fd uintptr) bool {
	_, err := syscall.Read(int(fd), c.buf[:])
	c.alive = err == syscall.EAGAIN
	return true
}
