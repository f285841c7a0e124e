package redistest

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stop freezes the process with SIGSTOP: the kernel still accepts
// connections and buffers commands, and nothing answers until Cont. A
// stopped server still dies by Kill at cleanup.
func (s *Server) Stop() { s.signal(syscall.SIGSTOP) }

// Cont resumes a server frozen by Stop; it then runs every command that
// was buffered meanwhile, whether or not its client is still waiting.
func (s *Server) Cont() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("signal %v: redis-server on %s is not running", sig, s.Addr)
	}
	if err := syscall.Kill(s.cmd.Process.Pid, sig); err != nil {
		s.t.Fatalf("signal %v to redis-server on %s: %v", sig, s.Addr, err)
	}
}

// KillClients closes every normal client connection of the server but the
// one it is sent on (CLIENT KILL TYPE normal SKIPME yes), as an operator
// or a proxy in front of Redis might, and reports how many it closed.
func (s *Server) KillClients(ctx context.Context) (int64, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS, MaxRetries: -1})
	defer c.Close()
	return c.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Int64()
}

// Link is a TCP link to a Redis that a test breaks on purpose the ways a
// network or a middlebox does, and heals again. It starts healthy unless
// told otherwise; every connection it carries is closed at cleanup.
type Link struct {
	Addr   string
	target string
	ln     net.Listener

	mu    sync.Mutex
	fault linkFault
	rate  int           // bytes a second while squeezed
	delay time.Duration // how long each reply is held while delayed
	conns map[net.Conn]struct{}

	resets    atomic.Int64
	swallowed atomic.Int64
}

type linkFault uint8

const (
	linkHealthy linkFault = iota
	linkBlackholed
	linkResetting
	linkSqueezed
	linkDelayed
)

// StartLink starts a link to target; blackholed makes it a black hole
// from the first connection on.
func StartLink(t testing.TB, target string, blackholed bool) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &Link{Addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	if blackholed {
		l.fault = linkBlackholed
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		l.mu.Lock()
		for c := range l.conns {
			c.Close()
		}
		l.conns = nil
		l.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.serve(c)
			}()
		}
	}()
	return l
}

// Delay holds every reply for d before it goes on: a slow Redis, or a slow
// path to it, whose answers do arrive, late.
func (l *Link) Delay(d time.Duration) {
	l.mu.Lock()
	l.fault, l.delay = linkDelayed, d
	l.mu.Unlock()
}

// Heal ends every fault. Connections that went into a black hole stay
// dead: their clients must give up on them and dial again.
func (l *Link) Heal() { l.set(linkHealthy, 0) }

// Blackhole makes the link swallow everything both ways and answer
// nothing, keeping connections open: a partition, or a firewall that drops.
func (l *Link) Blackhole() { l.set(linkBlackholed, 0) }

// ResetMidReply makes the link forward part of each reply and then reset
// the connection (RST, SO_LINGER 0): the command ran, its client learns
// half of the answer.
func (l *Link) ResetMidReply() { l.set(linkResetting, 0) }

// Squeeze makes replies trickle at bytesPerSecond, one byte at a time.
func (l *Link) Squeeze(bytesPerSecond int) { l.set(linkSqueezed, max(bytesPerSecond, 1)) }

// Resets counts the connections reset by ResetMidReply.
func (l *Link) Resets() int64 { return l.resets.Load() }

// Swallowed counts the writes of clients the black hole has swallowed:
// a test sees a call go into it.
func (l *Link) Swallowed() int64 { return l.swallowed.Load() }

// swallow is the black hole's end of a connection dialed into it.
type swallow struct{ l *Link }

func (s swallow) Write(p []byte) (int, error) {
	s.l.swallowed.Add(1)
	return len(p), nil
}

func (l *Link) set(f linkFault, rate int) {
	l.mu.Lock()
	l.fault, l.rate = f, rate
	l.mu.Unlock()
}

func (l *Link) current() (linkFault, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fault, l.rate
}

func (l *Link) currentDelay() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.delay
}

// track registers c for closing at cleanup; once the link is closed it
// closes c instead and reports false.
func (l *Link) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns == nil {
		c.Close()
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

func (l *Link) serve(client net.Conn) {
	if !l.track(client) {
		return
	}
	defer l.untrack(client)
	if f, _ := l.current(); f == linkBlackholed {
		io.Copy(swallow{l}, client)
		return
	}
	server, err := net.DialTimeout("tcp", l.target, time.Second)
	if err != nil || !l.track(server) {
		return
	}
	defer l.untrack(server)
	// dead: the connection went into a black hole, and stays there.
	var dead atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer server.Close() // a client that hung up ends the replies too
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if f, _ := l.current(); f == linkBlackholed {
				dead.Store(true)
			}
			if n > 0 && dead.Load() {
				l.swallowed.Add(1)
			}
			if n > 0 && !dead.Load() {
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	l.replies(client, server, &dead)
	client.Close()
	server.Close()
	<-done
}

// replies carries what the server sends to the client, through the fault
// of the moment, until either side breaks.
func (l *Link) replies(client, server net.Conn, dead *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			f, rate := l.current()
			if f == linkBlackholed {
				dead.Store(true)
			}
			switch {
			case dead.Load():
			case f == linkResetting:
				client.Write(buf[:max(n/2, 1)])
				if tc, ok := client.(*net.TCPConn); ok {
					tc.SetLinger(0)
				}
				l.resets.Add(1)
				return
			case f == linkSqueezed:
				if !trickle(client, buf[:n], rate) {
					return
				}
			case f == linkDelayed:
				time.Sleep(l.currentDelay())
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			default:
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// trickle writes b to c one byte every 1/rate seconds; false when c broke.
func trickle(c net.Conn, b []byte, rate int) bool {
	gap := time.Second / time.Duration(rate)
	t := time.NewTimer(gap)
	defer t.Stop()
	for i := range b {
		<-t.C
		if _, err := c.Write(b[i : i+1]); err != nil {
			return false
		}
		t.Reset(gap)
	}
	return true
}

// WaitFor waits until cond holds, trying every 20ms, and returns how long
// that took; it fails the test if cond has not held within bound.
func WaitFor(t testing.TB, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}
