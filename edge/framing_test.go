package edge

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
	srv := testPublicServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
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

// message is where one request's head and whole message end in a stream.
type message struct {
	startLine        string
	headEnd, end     int
	refused, unended bool
}

// scannedMessages feeds stream to a scanner one byte at a time and notes
// where it saw each head and each message end.
func scannedMessages(stream []byte) []message {
	var s scanner
	var msgs []message
	lostAt := -1
	for i := range stream {
		wasBoundary := s.atBoundary()
		s.feed(stream[i:i+1], func(v verdict) {
			msgs = append(msgs, message{startLine: v.startLine, headEnd: i + 1, end: -1, refused: v.refusal != notRefused})
		}, func() { lostAt = i + 1 })
		if lostAt >= 0 {
			break
		}
		if !wasBoundary && s.atBoundary() && len(msgs) > 0 {
			msgs[len(msgs)-1].end = i + 1
		}
	}
	for i := range msgs {
		msgs[i].unended = msgs[i].end < 0
	}
	return msgs
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// servedMessages reads stream the way Go's HTTP/1 server does: requests
// in a loop with http.ReadRequest, each body read to its end, up to four CR
// or LF skipped after a POST; it stops at the first request or body the
// server would refuse or fail on. unended marks a body that failed.
func servedMessages(stream []byte) []message {
	cr := &countingReader{r: bytes.NewReader(stream)}
	br := bufio.NewReader(cr)
	offset := func() int { return cr.n - br.Buffered() }
	var msgs []message
	lastPOST := false
	for {
		if lastPOST {
			peek, _ := br.Peek(maxLeadingCRLF)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			br.Discard(n)
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			return msgs
		}
		m := message{startLine: req.Method + " " + req.RequestURI + " " + req.Proto, headEnd: offset()}
		_, err = io.Copy(io.Discard, req.Body)
		if err == nil {
			err = req.Body.Close()
		}
		if err != nil {
			m.unended = true
			return append(msgs, m)
		}
		m.end = offset()
		msgs = append(msgs, m)
		lastPOST = req.Method == "POST"
	}
}

// FuzzBoundaries holds the scanner to Go's request reader: on every head
// both see, they agree where it ends and what its request line is, and
// wherever the scanner says a message ended and goes on, the server ended
// it there too. The scanner may stop early (a refusal, or lost track): the
// connection then closes after that request.
func FuzzBoundaries(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\nGET /x HTTP/1.1\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\nHost: a\n\n",
	} {
		f.Add([]byte(seed))
	}
	if files, err := filepath.Glob(filepath.Join("..", "testdata", "smuggling", "*.txt")); err == nil {
		for _, name := range files {
			if b, err := os.ReadFile(name); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, stream []byte) {
		scanned, served := scannedMessages(stream), servedMessages(stream)
		for i := range min(len(scanned), len(served)) {
			s, g := scanned[i], served[i]
			if s.startLine != g.startLine || s.headEnd != g.headEnd {
				t.Fatalf("head %d: scanner %q ending at %d, server %q ending at %d", i, s.startLine, s.headEnd, g.startLine, g.headEnd)
			}
			if s.refused || s.unended || g.unended {
				return
			}
			if s.end != g.end {
				t.Fatalf("message %d %q: the scanner ends it at %d, the server at %d", i, s.startLine, s.end, g.end)
			}
		}
	})
}

// testPublicServer is newPublicServer with the defaults and nothing logged.
func testPublicServer(h http.Handler) *fastServer {
	return newPublicServer(h, "http", Options{}.withDefaults(), newFramingRefusals(nil, slog.New(slog.DiscardHandler)), newTunnels(), log.New(io.Discard, "", 0))
}

func TestAPublicServerOnAnUnscannedListenerServesNoHTTP1Request(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Bool
	srv := testPublicServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Store(true) }))
	go srv.Serve(ln) // no framing listener: a wiring mistake
	t.Cleanup(func() { srv.Close() })
	res, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !res.Close || reached.Load() {
		t.Fatalf("status %d, close %v, handler reached %v; want 400, close, not reached", res.StatusCode, res.Close, reached.Load())
	}
}

func BenchmarkScanner(b *testing.B) {
	head := []byte("POST /api/v1/orders?page=2 HTTP/1.1\r\nHost: api.example.com\r\nUser-Agent: bench/1.0\r\n" +
		"Accept: application/json\r\nX-API-Key: 0123456789abcdef\r\nContent-Type: application/json\r\nContent-Length: 16\r\n\r\n{\"order\":123456}")
	var s scanner
	emit, lose := func(verdict) {}, func() {}
	b.SetBytes(int64(len(head)))
	b.ReportAllocs()
	for b.Loop() {
		s.feed(head, emit, lose)
	}
}
