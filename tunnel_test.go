package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// An upgraded tunnel open when the gateway drains is closed, on both
// sides, once shutdown_timeout passes, and the drain returns.
func TestADrainClosesAnOpenTunnel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	upstreamClosed := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		io.Copy(c, br) // echo until the gateway closes its side
		close(upstreamClosed)
	}()

	path := filepath.Join(t.TempDir(), "gateway.hcl")
	src := fmt.Sprintf(`
listen {
  http             = "127.0.0.1:0"
  admin            = "127.0.0.1:0"
  shutdown_timeout = "1s"
}
policy "per-client" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1h"
}
route "chat" {
  path     = "/chat"
  upstream = "http://%s"
  policy   = "per-client"
  subject  = ["client_ip"]
  upgrade  = ["websocket"]
}
`, ln.Addr())
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startFile(t, path)

	c, err := net.Dial("tcp", r.servers.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	io.WriteString(c, "ping")
	echo := make([]byte, 4)
	if _, err := io.ReadFull(br, echo); err != nil || string(echo) != "ping" {
		t.Fatalf("echo through the tunnel: %q %v", echo, err)
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case <-r.exited:
		if r.code != 1 {
			t.Fatalf("exit code %d, want 1 (the drain timed out on the tunnel)", r.code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the drain did not return with a tunnel open")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := br.Read(echo); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the client side of the tunnel is still open: %d %v", n, err)
	}
	select {
	case <-upstreamClosed:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream side of the tunnel is still open")
	}
}

// A tunnel whose client stops reading while the
// upstream streams is closed on both sides once tunnel_idle_timeout passes,
// and its goroutines and its place under max_connections_per_client come
// back.
func TestATunnelWhoseClientStopsReadingIsClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	upstreamDone := make(chan struct{})
	go func() {
		defer close(upstreamDone)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		chunk := make([]byte, 16<<10)
		for {
			// Streams until the gateway closes its side.
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()

	path := filepath.Join(t.TempDir(), "gateway.hcl")
	src := fmt.Sprintf(`
listen {
  http                       = "127.0.0.1:0"
  admin                      = "127.0.0.1:0"
  max_connections_per_client = 1
  tunnel_idle_timeout        = "500ms"
}
route "chat" {
  path     = "/chat"
  upstream = "http://%s"
  upgrade  = ["websocket"]
}
`, ln.Addr())
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := startFile(t, path)
	addr := r.servers.HTTPAddr().String()

	// A small receive buffer, so that the upstream's stream fills it and
	// the gateway's writes to this client block.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /chat HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	// The client reads no more.

	select {
	case <-upstreamDone:
	case <-time.After(15 * time.Second):
		t.Fatal("the upstream side of the tunnel is still open")
	}
	// The slot of the one connection this client may hold comes back: a
	// new connection is served, not closed as it is accepted.
	deadline := time.Now().Add(15 * time.Second)
	for {
		status, err := getOnNewConnection(addr, "/nothing-here")
		if err == nil && status == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client's connection slot did not come back: %d %v", status, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// And no goroutine is left copying the tunnel.
	for {
		n := tunnelGoroutines()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still copy the tunnel", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The client's side was closed: after the bytes it left unread, EOF.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client side of the tunnel is still open: %v", err)
	}
}

// getOnNewConnection sends one GET on a connection of its own and returns
// the status.
func getOnNewConnection(addr, path string) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

// tunnelGoroutines counts the goroutines in ReverseProxy's tunnel code.
func tunnelGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("httputil.(*ReverseProxy).handleUpgradeResponse")) || bytes.Contains(g, []byte("httputil.switchProtocolCopier")) {
			count++
		}
	}
	return count
}
