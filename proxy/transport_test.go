package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawTarget accepts connections and answers each request it reads with
// what answer returns for it (by connection and request number, from 1);
// hangUp closes the connection after the answer, "" without one. It
// counts connections and requests, and says when a connection ended.
type rawTarget struct {
	ln       net.Listener
	conns    atomic.Int64
	requests atomic.Int64
	ended    chan int // connection numbers, as each ends (either side)
}

func newRawTarget(t *testing.T, answer func(conn, n int, req *http.Request) (out string, hangUp bool)) *rawTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawTarget{ln: ln, ended: make(chan int, 100)}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			id := int(u.conns.Add(1))
			wg.Go(func() {
				defer func() { c.Close(); u.ended <- id }()
				br := bufio.NewReader(c)
				for n := 1; ; n++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					u.requests.Add(1)
					out, hangUp := answer(id, n, req)
					if out != "" {
						if _, err := io.WriteString(c, out); err != nil {
							return
						}
					}
					if hangUp {
						return
					}
				}
			})
		}
	})
	return u
}

func (u *rawTarget) url(path string) string { return "http://" + u.ln.Addr().String() + path }

// waitEnded waits for the target to see connection id end.
func (u *rawTarget) waitEnded(t *testing.T, id int) {
	t.Helper()
	for {
		select {
		case got := <-u.ended:
			if got == id {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %d did not end", id)
		}
	}
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

func answerAlways(out string) func(int, int, *http.Request) (string, bool) {
	return func(int, int, *http.Request) (string, bool) { return out, false }
}

func newTestLean(t *testing.T, tune func(*leanTransport)) *leanTransport {
	t.Helper()
	if !leanSupported {
		t.Skip("no lean transport on this platform")
	}
	p, err := Pool{Name: "p", Targets: []string{"http://x"}, ResponseTimeout: 300 * time.Millisecond}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	lt := newPoolTransport(p).lean
	if tune != nil {
		tune(lt)
	}
	t.Cleanup(lt.CloseIdleConnections)
	return lt
}

// send sends a request without a body over lt and reads the whole
// response body.
func send(lt *leanTransport, method, url string) (*http.Response, string, error) {
	req, _ := http.NewRequest(method, url, nil)
	res, err := lt.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res, string(b), err
}

func TestTheLeanTransportKeepsAConnectionOnlyWhenTheResponseAllows(t *testing.T) {
	for _, c := range []struct {
		name, method, answer, body string
		conns                      int64
	}{
		{"a body of known length", "GET", okAnswer, "ok", 1},
		{"a chunked body", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", "ok", 1},
		{"an answer to HEAD, whose Content-Length has no body", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", "", 1},
		{"a 204", "GET", "HTTP/1.1 204 No Content\r\n\r\n", "", 1},
		{"a 304 with a Content-Length", "GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n", "", 1},
		{"an answer that says close", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", "ok", 3},
		{"an HTTP/1.0 answer", "GET", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok", 3},
		{"a body that ends with the connection", "GET", "HTTP/1.1 200 OK\r\n\r\nok", "ok", 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			lt := newTestLean(t, nil)
			// The target hangs up after each answer only when the answer
			// says the connection ends.
			u := newRawTarget(t, func(int, int, *http.Request) (string, bool) { return c.answer, c.conns > 1 })
			for i := range 3 {
				_, body, err := send(lt, c.method, u.url("/"))
				if err != nil || body != c.body {
					t.Fatalf("request %d: %q, %v; want %q", i+1, body, err, c.body)
				}
			}
			if n := u.conns.Load(); n != c.conns {
				t.Fatalf("%d connections for 3 requests, want %d", n, c.conns)
			}
		})
	}
}

// An upstream closes a keep-alive connection when its own idle timeout
// ends, often before ours; or it sends bytes nobody asked for. Either
// way the idle connection is closed before anything is written to it and
// the request goes over a new one.
func TestTheLeanTransportChecksAnIdleConnectionBeforeItWrites(t *testing.T) {
	for _, c := range []struct {
		name   string
		first  string
		hangUp bool
	}{
		{"closed by the upstream", okAnswer, true},
		{"with bytes nobody asked for", okAnswer + "HTTP/1.1 200 OK\r\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Checked however briefly it was idle.
			lt := newTestLean(t, func(lt *leanTransport) { lt.checkIdleAfter = 0 })
			u := newRawTarget(t, func(conn, n int, _ *http.Request) (string, bool) {
				if conn == 1 {
					return c.first, c.hangUp
				}
				return okAnswer, false
			})
			if _, body, err := send(lt, "GET", u.url("/")); err != nil || body != "ok" {
				t.Fatalf("first request: %q, %v", body, err)
			}
			if c.hangUp {
				u.waitEnded(t, 1)
			}
			if _, body, err := send(lt, "GET", u.url("/")); err != nil || body != "ok" {
				t.Fatalf("after the upstream closed: %q, %v", body, err)
			}
			if n := u.requests.Load(); n != 2 {
				t.Fatalf("the upstream read %d requests, want 2", n)
			}
		})
	}
}

// A connection that failed under a request is not used again, and the
// request is not sent again: the upstream may have read it.
func TestTheLeanTransportSendsARequestOnce(t *testing.T) {
	lt := newTestLean(t, nil)
	u := newRawTarget(t, func(conn, n int, req *http.Request) (string, bool) {
		if req.URL.Path == "/once" {
			return "", true
		}
		return okAnswer, false
	})
	if _, _, err := send(lt, "GET", u.url("/warm")); err != nil {
		t.Fatal(err)
	}
	_, _, err := send(lt, "GET", u.url("/once"))
	if err == nil {
		t.Fatal("no error for a request the upstream read and did not answer")
	}
	if cause, _ := classify(httptestRequest(), err); cause != causeReset {
		t.Errorf("classified %s, want reset (%v)", causeNames[cause], err)
	}
	if n := u.requests.Load(); n != 2 {
		t.Fatalf("the upstream read %d requests, want 2", n)
	}
}

func httptestRequest() *http.Request {
	req, _ := http.NewRequest("GET", "http://x/", nil)
	return req
}

// A body closed before its end closes the connection (what is left of it
// is not read: it may never end); one read to its end lets it carry the
// next request.
func TestTheLeanTransportClosesAConnectionWhoseBodyWasNotRead(t *testing.T) {
	lt := newTestLean(t, nil)
	u := newRawTarget(t, func(conn, n int, req *http.Request) (string, bool) {
		if req.URL.Path == "/endless" {
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n", false
		}
		return okAnswer, false
	})
	req, _ := http.NewRequest("GET", u.url("/endless"), nil)
	res, err := lt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(res.Body, buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { res.Body.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("closing a body before its end waited for the rest")
	}
	u.waitEnded(t, 1)
	if _, body, err := send(lt, "GET", u.url("/")); err != nil || body != "ok" {
		t.Fatalf("next request: %q, %v", body, err)
	}
	if n := u.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestTheLeanTransportBoundsTheWaitForAResponseHead(t *testing.T) {
	lt := newTestLean(t, nil) // a response timeout of 300ms
	hold := make(chan struct{})
	u := newRawTarget(t, func(int, int, *http.Request) (string, bool) { <-hold; return "", true })
	t.Cleanup(func() { close(hold) }) // before the target's cleanup, which waits for it
	start := time.Now()
	_, _, err := send(lt, "GET", u.url("/"))
	var netErr net.Error
	if !errors.As(err, &netErr) || !netErr.Timeout() {
		t.Fatalf("error %v, want a timeout", err)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 3*time.Second {
		t.Fatalf("timed out after %v, want about 300ms", d)
	}
	if cause, _ := classify(httptestRequest(), err); cause != causeResponseTimeout {
		t.Errorf("classified %s, want response_timeout", causeNames[cause])
	}
}

// The request's context ending (the client left) ends the exchange, in
// the write of the request, the wait for the head and the body alike: at the watch's end when it
// ends before it (the socket's deadline looks at the context), at once
// after it (the context closes the connection).
func TestTheLeanTransportEndsWithTheRequestsContext(t *testing.T) {
	for _, c := range []struct {
		name              string
		watchAfter, after time.Duration // the context ends after
	}{
		{"within the watch", 200 * time.Millisecond, 20 * time.Millisecond},
		{"after the watch", 20 * time.Millisecond, 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			lt := newTestLean(t, func(lt *leanTransport) { lt.responseTimeout, lt.watchAfter = time.Minute, c.watchAfter })
			hold := make(chan struct{})
			u := newRawTarget(t, func(conn, n int, req *http.Request) (string, bool) {
				switch req.URL.Path {
				case "/ok":
					return okAnswer, false
				case "/body":
					return "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok", false
				}
				<-hold
				return "", true
			})
			t.Cleanup(func() { close(hold) })
			// Ended, the exchange took the watch or the context's end,
			// whichever is later, and not the minute of the response
			// timeout.
			bound := max(c.watchAfter, c.after) + 2*time.Second

			// Over a connection that has just carried a request, which
			// keeps its watch's deadline (arm).
			if _, _, err := send(lt, "GET", u.url("/ok")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, "GET", u.url("/head"), nil)
			time.AfterFunc(c.after, cancel)
			start := time.Now()
			if _, err := lt.RoundTrip(req); !errors.Is(err, context.Canceled) {
				t.Fatalf("head: error %v, want the context's", err)
			}
			if d := time.Since(start); d < c.after || d > bound {
				t.Fatalf("head: ended after %v", d)
			}

			ctx, cancel = context.WithCancel(context.Background())
			req, _ = http.NewRequestWithContext(ctx, "GET", u.url("/body"), nil)
			start = time.Now()
			res, err := lt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(c.after, cancel)
			if _, err := io.ReadAll(res.Body); err == nil {
				t.Fatal("body: the body of a cancelled request read to its end")
			}
			res.Body.Close()
			if d := time.Since(start); d < c.after || d > bound {
				t.Fatalf("body: ended after %v", d)
			}

			// A target that reads nothing, and a request head larger
			// than the sockets' buffers: the write waits.
			deaf, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { deaf.Close() })
			go func() {
				for {
					c, err := deaf.Accept()
					if err != nil {
						return
					}
					t.Cleanup(func() { c.Close() })
				}
			}()
			ctx, cancel = context.WithCancel(context.Background())
			req, _ = http.NewRequestWithContext(ctx, "GET", "http://"+deaf.Addr().String()+"/", nil)
			req.Header.Set("X-Large", strings.Repeat("a", 64<<20))
			time.AfterFunc(c.after, cancel)
			start = time.Now()
			if _, err := lt.RoundTrip(req); !errors.Is(err, context.Canceled) {
				t.Fatalf("write: error %v, want the context's", err)
			}
			if d := time.Since(start); d < c.after || d > bound {
				t.Fatalf("write: ended after %v", d)
			}
		})
	}
}

// A request is sent with its answer's first read; a head larger than the
// writer's buffer goes out in pieces as it is written, the last with the
// read, and arrives whole, as do the requests after it on the same
// connection.
func TestTheLeanTransportSendsAHeadLargerThanTheSocketsBuffer(t *testing.T) {
	lt := newTestLean(t, func(lt *leanTransport) { lt.responseTimeout = time.Minute })
	large := strings.Repeat("a", 1<<20)
	u := newRawTarget(t, func(_, _ int, req *http.Request) (string, bool) {
		if v := req.Header.Get("X-Large"); v != "" && v != large {
			return "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", false
		}
		return okAnswer, false
	})
	for i, size := range []int{0, len(large), 0} {
		req, _ := http.NewRequest("GET", u.url("/"), nil)
		if size > 0 {
			req.Header.Set("X-Large", large)
		}
		res, err := lt.RoundTrip(req)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("request %d: %d %q, %v; want 200 ok", i+1, res.StatusCode, body, err)
		}
	}
	if n := u.conns.Load(); n != 1 {
		t.Fatalf("%d connections for 3 requests, want 1", n)
	}
}

// A response read whole is no reason to keep a connection whose request's
// context ended meanwhile: the next request dials anew.
func TestTheLeanTransportKeepsNoConnectionOfAnEndedContext(t *testing.T) {
	lt := newTestLean(t, nil)
	u := newRawTarget(t, answerAlways(okAnswer))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", u.url("/"), nil)
	res, err := lt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if b, err := io.ReadAll(res.Body); err != nil || string(b) != "ok" {
		t.Fatalf("%q, %v", b, err)
	}
	res.Body.Close()
	u.waitEnded(t, 1)
	if _, body, err := send(lt, "GET", u.url("/")); err != nil || body != "ok" {
		t.Fatalf("%q, %v", body, err)
	}
	if n := u.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestTheLeanTransportRelaysInformationalResponsesAndTrailers(t *testing.T) {
	lt := newTestLean(t, nil)
	u := newRawTarget(t, answerAlways("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"+
		"HTTP/1.1 200 OK\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Sum: 42\r\n\r\n"))
	var got []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		got = append(got, h.Get("Link"))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", u.url("/"), nil)
	res, err := lt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || string(b) != "ok" || res.StatusCode != 200 {
		t.Fatalf("%d %q %v", res.StatusCode, b, err)
	}
	if len(got) != 1 || got[0] != "</a.css>; rel=preload" {
		t.Errorf("1xx relayed: %q", got)
	}
	if res.Trailer.Get("X-Sum") != "42" {
		t.Errorf("trailer %v", res.Trailer)
	}
}

func TestTheLeanTransportRefusesAnEndlessHead(t *testing.T) {
	lt := newTestLean(t, func(lt *leanTransport) { lt.responseTimeout = 10 * time.Second })
	u := newRawTarget(t, answerAlways("HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", maxResponseHeadBytes+1)+"\r\n\r\n"))
	if _, _, err := send(lt, "GET", u.url("/")); err == nil || !strings.Contains(err.Error(), "exceeded") {
		t.Fatalf("error %v, want the head's limit", err)
	}
}

func TestTheLeanTransportKeepsNoMoreIdleThanItMay(t *testing.T) {
	lt := newTestLean(t, func(lt *leanTransport) { lt.maxIdlePerHost = 1 })
	release := make(chan struct{})
	var waiting sync.WaitGroup
	waiting.Add(2)
	u := newRawTarget(t, func(int, int, *http.Request) (string, bool) {
		waiting.Done()
		<-release
		return okAnswer, false
	})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, _, err := send(lt, "GET", u.url("/")); err != nil {
				t.Error(err)
			}
		})
	}
	waiting.Wait()
	close(release)
	wg.Wait()
	select {
	case <-u.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("a second idle connection was kept")
	}
	if n := len(lt.idle[u.ln.Addr().String()].conns); n != 1 {
		t.Fatalf("%d idle connections, want 1", n)
	}
}

func TestTheLeanTransportClosesConnectionsIdleForTheIdleTimeout(t *testing.T) {
	lt := newTestLean(t, func(lt *leanTransport) { lt.idleTimeout = 100 * time.Millisecond })
	u := newRawTarget(t, answerAlways(okAnswer))
	start := time.Now()
	if _, _, err := send(lt, "GET", u.url("/")); err != nil {
		t.Fatal(err)
	}
	u.waitEnded(t, 1)
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("closed after %v, before the idle timeout", d)
	}
	// The sweep rearms for connections that go idle later.
	if _, _, err := send(lt, "GET", u.url("/")); err != nil {
		t.Fatal(err)
	}
	u.waitEnded(t, 2)
}

func TestOnlyPlainRequestsWithoutABodyGoOverTheLeanTransport(t *testing.T) {
	pt := &poolTransport{lean: &leanTransport{}}
	for _, c := range []struct {
		name string
		req  func() *http.Request
		lean bool
	}{
		{"a GET", func() *http.Request { r, _ := http.NewRequest("GET", "http://x/", nil); return r }, true},
		{"a POST without a body", func() *http.Request { r, _ := http.NewRequest("POST", "http://x/", nil); return r }, true},
		{"a POST with a body", func() *http.Request { r, _ := http.NewRequest("POST", "http://x/", strings.NewReader("a")); return r }, false},
		{"a request to https", func() *http.Request { r, _ := http.NewRequest("GET", "https://x/", nil); return r }, false},
		{"an upgrade", func() *http.Request {
			r, _ := http.NewRequest("GET", "http://x/", nil)
			r.Header.Set("Connection", "Upgrade")
			r.Header.Set("Upgrade", "websocket")
			return r
		}, false},
	} {
		if got := pt.leanCarries(c.req()); got != c.lean {
			t.Errorf("%s: lean %t, want %t", c.name, got, c.lean)
		}
	}
}

// BenchmarkLeanTransport is one GET over a kept-alive loopback connection:
// the lean transport's own cost, allocations included. Each request has a
// context of its own, as every request the server hands the gateway has,
// so that what the transport hangs on it costs what it costs there.
// cpu-ns/op is the process's CPU time, the loopback target's included.
func BenchmarkLeanTransport(b *testing.B) {
	if !leanSupported {
		b.Skip("no lean transport on this platform")
	}
	p, err := Pool{Name: "p", Targets: []string{"http://x"}}.withDefaults()
	if err != nil {
		b.Fatal(err)
	}
	lt := newPoolTransport(p).lean
	defer lt.CloseIdleConnections()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	req, _ := http.NewRequestWithContext(context.Background(), "GET", srv.URL+"/", nil)
	// As ReverseProxy sends it: no User-Agent of Go's.
	req.Header["User-Agent"] = []string{""}
	buf := make([]byte, 512)
	b.ReportAllocs()
	cpu0 := ProcessCPU()
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		ctx.Done() // made, as ReverseProxy makes it
		res, err := lt.RoundTrip(req.WithContext(ctx))
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := res.Body.Read(buf); err != nil {
				break
			}
		}
		res.Body.Close()
		cancel()
	}
	b.ReportMetric(float64(ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}
