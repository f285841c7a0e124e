package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func startUpstream(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go new(upstream).serve(l)
	return l.Addr().String()
}

func TestUpstreamAnswersAsNetHTTPDid(t *testing.T) {
	addr := startUpstream(t)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for range 3 {
		resp, err := client.Get("http://" + addr + "/anything?x=1")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || string(body) != upstreamBody || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("got %d %q %q, want 200 %q application/json", resp.StatusCode, body, resp.Header.Get("Content-Type"), upstreamBody)
		}
		if d, err := http.ParseTime(resp.Header.Get("Date")); err != nil || time.Since(d) > time.Minute {
			t.Fatalf("Date %q: %v", resp.Header.Get("Date"), err)
		}
	}
	// The counters, over the same kept-alive connection.
	resp, err := client.Get("http://" + addr + upstreamStatsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	c, err := parseUpstreamCounters(string(body))
	if err != nil || c.requests != 3 || c.conns != 1 {
		t.Fatalf("stats %q (%v): want 3 requests over 1 connection", body, err)
	}
}

func TestUpstreamPipelinedBodiesAndClose(t *testing.T) {
	addr := startUpstream(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Three at once: a GET, a POST whose body must not be taken for the
	// next request, and one that closes the connection.
	_, err = io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"+
		"POST /b HTTP/1.1\r\nHost: x\r\ncontent-length: 26\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n"+
		"GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	for i := range 3 {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != upstreamBody {
			t.Fatalf("answer %d: %d %q", i, resp.StatusCode, body)
		}
		if last := i == 2; resp.Close != last {
			t.Fatalf("answer %d: Connection: close is %v", i, resp.Close)
		}
	}
	if n, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after Connection: close: read %d, %v; want the connection closed", n, err)
	}
}

func TestUpstreamRefusesWhatItCannotRead(t *testing.T) {
	for _, tt := range []struct{ request, status string }{
		{"GET /\r\n\r\n", "400"},
		{"GET / HTTP/1.1\r\nno colon\r\n\r\n", "400"},
		{"GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 9000) + "\r\n\r\n", "400"},
		{"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "400"},
		{"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\n\r\n", "501"},
	} {
		c, err := net.Dial("tcp", startUpstream(t))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, tt.request)
		got, _ := io.ReadAll(c) // the upstream closes after it
		c.Close()
		if !strings.HasPrefix(string(got), "HTTP/1.1 "+tt.status+" ") {
			t.Errorf("%.40q: got %.60q, want %s and the connection closed", tt.request, got, tt.status)
		}
	}
}
