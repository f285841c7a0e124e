package edge

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
)

func verdictsOf(stream string, chunkSize int) []bool {
	var s scanner
	var got []bool
	for len(stream) > 0 {
		n := min(chunkSize, len(stream))
		s.feed([]byte(stream[:n]), func(bad bool) { got = append(got, bad) })
		stream = stream[n:]
	}
	return got
}

func TestScannerFollowsTheServersFraming(t *testing.T) {
	cases := []struct {
		name   string
		stream string
		want   []bool
	}{
		{"one request without a body", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", []bool{false}},
		{"pipelined requests with Content-Length bodies that look like heads",
			"POST / HTTP/1.1\r\nContent-Length: 46\r\n\r\nGET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n", []bool{false, false}},
		{"a chunked body with extensions and trailers",
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n" +
				"GET / HTTP/1.1\r\n\r\n", []bool{false, false}},
		{"both headers, then a request after the chunked body",
			"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n", []bool{true, false}},
		{"header names in any case", "POST / HTTP/1.1\r\ncontent-length: 0\r\nTRANSFER-ENCODING: chunked\r\n\r\n0\r\n\r\n", []bool{true}},
		{"an upgraded connection is no longer scanned", "GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", []bool{false}},
	}
	for _, c := range cases {
		for _, size := range []int{1, 3, 7, 1 << 16} {
			t.Run(fmt.Sprintf("%s, read %d bytes at a time", c.name, size), func(t *testing.T) {
				if got := verdictsOf(c.stream, size); fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Fatalf("verdicts %v, want %v", got, c.want)
				}
			})
		}
	}
}

func FuzzScanner(f *testing.F) {
	f.Add("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 5)
	f.Add("GET / HTTP/1.1\r\n\r\n", 1)
	f.Fuzz(func(t *testing.T, stream string, size int) {
		if size < 1 || size > 1<<16 {
			size = 1
		}
		// Reading in pieces of any size must give the same verdicts.
		whole, pieces := verdictsOf(stream, len(stream)+1), verdictsOf(stream, size)
		if fmt.Sprint(whole) != fmt.Sprint(pieces) {
			t.Fatalf("whole %v, in pieces of %d %v", whole, size, pieces)
		}
	})
}

// failOnce fails its first Accept the way a process out of file
// descriptors does.
type failOnce struct {
	net.Listener
	failed atomic.Bool
}

func (l *failOnce) Accept() (net.Conn, error) {
	if l.failed.CompareAndSwap(false, true) {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

func TestFramingListenerOutlivesATemporaryAcceptError(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flaky := &failOnce{Listener: inner}
	srv := &http.Server{
		Handler:  http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }),
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go srv.Serve(newFramingListener(flaky, nil, 0))
	t.Cleanup(func() { srv.Close() })
	res, err := http.Get("http://" + inner.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !flaky.failed.Load() {
		t.Fatalf("status %d, accept failed first: %v", res.StatusCode, flaky.failed.Load())
	}
}
