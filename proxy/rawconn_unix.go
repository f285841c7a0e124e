//go:build unix

package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
)

// leanSupported: the idle check below can be made.
const leanSupported = true

// rawConn is a lean connection's socket as Go's poller lends it, for two
// things the net.Conn cannot do: a read that does not wait (the idle
// check), and a request sent and its answer waited for with no read
// between the two.
type rawConn struct {
	raw   syscall.RawConn // nil: not a socket; checked and sent as any net.Conn
	check func(fd uintptr) bool
	send  func(fd uintptr) bool
	alive bool
	buf   [1]byte

	// The exchange under way in sendThenRead: the response's buffer, how
	// much of the request (out) went, whether the wait for the answer
	// began, and what the read returned.
	resp    []byte
	wrote   int
	waiting bool
	got     int
	errno   error
}

func (c *leanConn) initRaw(nc net.Conn) {
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn()
	}
	c.check = c.readIdle
	c.send = c.sendThenRead
}

// usable is the idle check: an idle connection can carry a request when
// the upstream has not closed it (an upstream's keep-alive timeout is
// often shorter than ours) and has sent nothing unasked. The standard
// Transport learns that from a read it keeps waiting on every connection;
// here it is one read that does not wait, when the connection is taken. A
// byte read is lost, which does not matter: a connection that had one is
// closed.
func (c *leanConn) usable() bool {
	if c.raw == nil {
		return true
	}
	c.alive = false
	if err := c.raw.Read(c.check); err != nil {
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

// sendRead sends c.out, the request, and reads the first bytes of its
// answer into p. Right after the write a read would find nothing (the
// upstream has yet to answer) and cost a syscall: here the poller's
// readiness is reset before the write, so the wait after it cannot miss
// the answer, and the socket is read once the poller says it can be. A
// write that does not take the whole request at once leaves the rest to
// Write and the read to the connection, as without the socket.
func (c *leanConn) sendRead(p []byte) (int, error) {
	out := c.out
	c.out = nil
	if c.raw == nil {
		return c.writeThenRead(out, p)
	}
	c.out, c.resp, c.wrote, c.waiting, c.got, c.errno = out, p, 0, false, 0, nil
	err := c.raw.Read(c.send)
	c.out, c.resp = nil, nil
	if !c.waiting {
		return c.writeThenRead(out[c.wrote:], p)
	}
	if err != nil {
		// The wait's: the socket's deadline, or the connection closed.
		var op *net.OpError
		if errors.As(err, &op) {
			err = op.Err
		}
		return 0, c.readError(err)
	}
	if c.errno != nil {
		return 0, c.readError(os.NewSyscallError("read", c.errno))
	}
	if c.got == 0 {
		return 0, io.EOF
	}
	return c.got, nil
}

// sendThenRead is sendRead's work under the poller: called first, it
// writes the request and, when all of it went, has the poller wait for
// the answer; called again once the socket is readable, it reads.
func (c *leanConn) sendThenRead(fd uintptr) bool {
	if !c.waiting {
		n, err := syscall.Write(int(fd), c.out)
		if err != nil || n < len(c.out) {
			c.wrote = max(n, 0)
			return true
		}
		c.waiting = true
		return false
	}
	for {
		n, err := syscall.Read(int(fd), c.resp)
		switch err {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.got, c.errno = max(n, 0), err
		return true
	}
}

// readError is a read's error as the connection's Read would have said it.
func (c *leanConn) readError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: c.conn.LocalAddr(), Addr: c.conn.RemoteAddr(), Err: err}
}
