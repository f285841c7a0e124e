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

// verdictsOf feeds stream to a scanner chunkSize bytes at a time and
// returns what it said: "ok" or the refusal for each head, then "lost"
// when it stopped following.
func verdictsOf(stream string, chunkSize int) []string {
	var s scanner
	var got []string
	emit := func(v verdict) {
		if v.refusal == notRefused {
			got = append(got, "ok")
		} else {
			got = append(got, v.refusal.String())
		}
	}
	lose := func() { got = append(got, "lost") }
	for len(stream) > 0 {
		n := min(chunkSize, len(stream))
		s.feed([]byte(stream[:n]), emit, lose)
		stream = stream[n:]
	}
	return got
}

func TestScannerFollowsTheServersFraming(t *testing.T) {
	cases := []struct {
		name   string
		stream string
		want   []string
	}{
		{"one request without a body", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", []string{"ok"}},
		{"pipelined requests with Content-Length bodies that look like heads",
			"POST / HTTP/1.1\r\nContent-Length: 46\r\n\r\nGET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"GET /2 HTTP/1.1\r\nHost: a\r\n\r\n", []string{"ok", "ok"}},
		{"a chunked body with extensions and trailers",
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n" +
				"GET / HTTP/1.1\r\n\r\n", []string{"ok", "ok"}},
		{"both headers: refused, and nothing after is scanned",
			"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n", []string{"conflicting_framing", "lost"}},
		{"header names in any case", "POST / HTTP/1.1\r\ncontent-length: 0\r\nTRANSFER-ENCODING: chunked\r\n\r\n0\r\n\r\n", []string{"conflicting_framing", "lost"}},
		{"an upgrade is the last request followed", "GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", []string{"ok", "lost"}},
		{"Transfer-Encoding on HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"http10_transfer_encoding", "lost"}},
		{"a folded header line", "GET / HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n", []string{"obs_fold", "lost"}},
		{"a transfer coding the server does not take", "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", []string{"ok", "lost"}},
		{"a chunk size of 17 digits", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000005\r\n", []string{"ok", "lost"}},
		{"a chunk line ending in a bare LF", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n", []string{"ok", "lost"}},
		{"bare LF line ends in the head", "GET / HTTP/1.1\nHost: a\n\nGET /2 HTTP/1.1\n\n", []string{"ok", "ok"}},
		{"up to four CR or LF after a POST are skipped, like the server does",
			"POST / HTTP/1.1\r\nContent-Length: 1\r\n\r\na\r\n\r\nGET / HTTP/1.1\r\n\r\n", []string{"ok", "ok"}},
		{"an empty line after a GET is no request line", "GET / HTTP/1.1\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", []string{"ok", "lost"}},
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
