package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
