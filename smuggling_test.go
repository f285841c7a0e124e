package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawUpstream is an upstream that is no HTTP server: it records the bytes
// each connection brings, parses them into requests itself and answers each
// with 200 and a body naming the request ("GET /orders"), so a client can
// tell which upstream request a response belongs to.
type rawUpstream struct {
	ln       net.Listener
	mu       sync.Mutex
	requests []string // "METHOD target" of every whole request parsed, in arrival order
	bytes    bytes.Buffer
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newRawUpstream(t *testing.T) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln}
	u.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns = append(u.conns, c)
			u.mu.Unlock()
			u.wg.Go(func() { u.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.conns {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

type recordingReader struct {
	r io.Reader
	u *rawUpstream
}

func (rr recordingReader) Read(p []byte) (int, error) {
	n, err := rr.r.Read(p)
	rr.u.mu.Lock()
	rr.u.bytes.Write(p[:n])
	rr.u.mu.Unlock()
	return n, err
}

func (u *rawUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(recordingReader{c, u})
	for {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		// A request counts once its body is whole: the gateway cuts the
		// upstream connection short when the client's body breaks.
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		name := req.Method + " " + req.RequestURI
		u.mu.Lock()
		u.requests = append(u.requests, name)
		u.mu.Unlock()
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(name), name)
	}
}

// since returns the requests parsed after the first n.
func (u *rawUpstream) since(n int) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.requests[n:])
}

// count returns how many requests and bytes the upstream has had.
func (u *rawUpstream) count() (requests, bytes int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.requests), u.bytes.Len()
}

func (u *rawUpstream) bytesSince(n int) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.bytes.String()[n:]
}

// TestSmugglingCorpus sends each payload of testdata/smuggling over its own
// connection, plain and TLS, to a gateway in front of a raw upstream, and holds the
// gateway to this: every request the upstream parses is one the client
// sent as a request (its request line is in the payload, and it is never
// /smuggled), and the gateway answered it to the client as one response.
// A payload that smuggles a request past the gateway's framing breaks one
// of the two.
func TestSmugglingCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "smuggling", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	up := newRawUpstream(t)
	dir := t.TempDir()
	ca := newTestCA(t)
	certFile, keyFile, _ := ca.leaf(t, dir, "gw.test")
	path := filepath.Join(dir, "gateway.hcl")
	src := fmt.Sprintf(`
listen {
  http             = "127.0.0.1:0"
  https            = "127.0.0.1:0"
  admin            = "127.0.0.1:0"
  shutdown_timeout = "5s"
}
tls {
  certificate {
    cert_file = %q
    key_file  = %q
  }
}
policy "per-client" {
  algorithm = "fixed-window"
  limit     = 1000000
  window    = "1h"
}
route "everything" {
  path     = "/"
  upstream = "http://%s"
  policy   = "per-client"
  subject  = ["client_ip"]
}
`, certFile, keyFile, up.ln.Addr())
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	gw := startFile(t, path)
	dials := []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"plain", func() (net.Conn, error) { return net.Dial("tcp", gw.servers.HTTPAddr().String()) }},
		{"TLS", func() (net.Conn, error) {
			return tls.Dial("tcp", gw.servers.HTTPSAddr().String(), &tls.Config{ServerName: "gw.test", RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
		}},
	}
	for _, file := range files {
		payload, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dials {
			t.Run(strings.TrimSuffix(filepath.Base(file), ".txt")+" over "+d.name, func(t *testing.T) {
				before, beforeBytes := up.count()
				statuses, echoes := sendRaw(t, d.dial, payload)
				forwarded := up.since(before)
				for _, r := range forwarded {
					if strings.Contains(r, "/smuggled") || !sentAsRequest(payload, r) {
						t.Errorf("the upstream got %q, which the client never sent as a request", r)
					}
				}
				if !slices.Equal(forwarded, echoes) {
					t.Errorf("the upstream parsed %q, the client got answers for %q", forwarded, echoes)
				}
				if t.Failed() {
					t.Logf("the client got %v; the upstream read %q", statuses, up.bytesSince(beforeBytes))
				}
			})
		}
	}
}

// sentAsRequest reports whether payload has a line starting with request
// ("METHOD target") and a version.
func sentAsRequest(payload []byte, request string) bool {
	line := []byte(request + " HTTP/")
	return bytes.HasPrefix(payload, line) || bytes.Contains(payload, append([]byte("\n"), line...))
}

// sendRaw writes payload on a new connection and reads responses until the
// gateway closes it or stays silent for two seconds. It returns each
// status and, for the upstream's answers, the request each names.
func sendRaw(t *testing.T, dial func() (net.Conn, error), payload []byte) (statuses []int, echoes []string) {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.As(err, &ne) {
				return statuses, echoes
			}
			t.Fatalf("after %v: %v", statuses, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			t.Fatalf("after %v: %v", statuses, err)
		}
		statuses = append(statuses, res.StatusCode)
		if res.StatusCode == http.StatusOK && res.Header.Get("Content-Type") == "text/plain" && len(body) > 0 {
			echoes = append(echoes, string(body))
		}
	}
}
