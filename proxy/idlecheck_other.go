//go:build !unix

package proxy

import "net"

// leanSupported: without a read that does not wait, an idle connection
// the upstream closed cannot be told from a live one before a request is
// written to it, so the standard Transport carries every request.
const leanSupported = false

type idleCheck struct{}

func (c *leanConn) initIdleCheck(net.Conn) {}

func (c *leanConn) usable() bool { return false }
