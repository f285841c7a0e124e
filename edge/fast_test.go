package edge

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveFast serves h on a fast server behind a framing listener, as a
// public listener is served, and returns its address.
func serveFast(t *testing.T, h http.Handler) (*fastServer, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := testPublicServer(h)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(newFramingListener(ln, nil, 0)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != http.ErrServerClosed {
			t.Errorf("Serve: %v", err)
		}
	})
	return srv, ln.Addr().String()
}

// servePlain serves h on net/http's server alone, the reference.
func servePlain(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// answer is what a client can tell of a response.
type answer struct {
	Status           int
	Header           http.Header
	Body             string
	Trailer          http.Header
	Close            bool
	ContentLength    int64
	TransferEncoding []string
	Informational    []int
}

// exchangeRaw sends raw on a new connection and reads one response per
// request given, each as its request's method expects.
func exchangeRaw(t *testing.T, addr, raw string, methods ...string) []answer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out []answer
	for _, m := range methods {
		var a answer
		req := &http.Request{Method: m}
		for {
			res, err := http.ReadResponse(br, req)
			if err != nil {
				t.Fatalf("response %d: %v", len(out), err)
			}
			if res.StatusCode < 200 {
				a.Informational = append(a.Informational, res.StatusCode)
				continue
			}
			body, err := io.ReadAll(res.Body)
			if err != nil {
				t.Fatalf("response %d body: %v", len(out), err)
			}
			res.Header.Del("Date")
			a.Status, a.Header, a.Body, a.Trailer, a.Close = res.StatusCode, res.Header, string(body), res.Trailer, res.Close
			a.ContentLength, a.TransferEncoding = res.ContentLength, res.TransferEncoding
			break
		}
		out = append(out, a)
	}
	return out
}

func TestTheFastPathAnswersAsNetHTTPDoes(t *testing.T) {
	long := strings.Repeat("x", 5000)
	for name, c := range map[string]struct {
		method  string
		headers string
		h       http.HandlerFunc
	}{
		"nothing written": {h: func(w http.ResponseWriter, r *http.Request) {}},
		"a short body of unknown length": {h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "<html><body>hello</body></html>")
		}},
		"a long body of unknown length": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, long[:1000])
			io.WriteString(w, long)
		}},
		"a body with its length": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "5000")
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, long)
		}},
		"a flushed body": {h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "part one")
			w.(http.Flusher).Flush()
			io.WriteString(w, "part two")
		}},
		"declared trailers": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Checksum, X-Count")
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "body")
			w.Header().Set("X-Checksum", "abc")
			w.Header().Set(http.TrailerPrefix+"X-Late", "1")
		}},
		"a HEAD with a length": {method: "HEAD", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "42")
			w.Header().Set("Content-Type", "text/plain")
		}},
		"a HEAD with a body written": {method: "HEAD", h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "not sent")
		}},
		"204": {h: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusNoContent)
			io.WriteString(w, "refused")
		}},
		"304 with a length": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(http.StatusNotModified)
		}},
		"early hints": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "after hints")
		}},
		"the handler closes": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		}},
		"the handler names close among other words": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "x, close")
			io.WriteString(w, "stays")
		}},
		"the handler names close to a client that closes": {headers: "Connection: close\r\n", h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "Close, x")
			io.WriteString(w, "bye")
		}},
		"the client closes": {headers: "Connection: close\r\n", h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "bye")
		}},
		"the client closes among other words": {headers: "Connection: x Close\r\n", h: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "bye")
		}},
		"a status without text": {h: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(599)
		}},
		"a value with a line break": {h: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Note", "one\r\ntwo")
		}},
	} {
		t.Run(name, func(t *testing.T) {
			method := c.method
			if method == "" {
				method = "GET"
			}
			var served sync.Map
			h := func(w http.ResponseWriter, r *http.Request) {
				served.Store(fmt.Sprintf("%T", w), true)
				c.h(w, r)
			}
			_, fast := serveFast(t, http.HandlerFunc(h))
			plain := servePlain(t, http.HandlerFunc(h))
			raw := method + " /x HTTP/1.1\r\nHost: example.test\r\n" + c.headers + "\r\n"
			want := exchangeRaw(t, plain, raw, method)
			got := exchangeRaw(t, fast, raw, method)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("fast path\n%+v\nnet/http\n%+v", got, want)
			}
			if _, ok := served.Load("*edge.fastResponse"); !ok {
				t.Errorf("the fast path did not serve it")
			}
		})
	}
}

func TestTheFastPathHandsAConnectionOverAtARequestItDoesNotServe(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	_, addr := serveFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s %s %q %T", r.Method, r.URL.Path, body, w))
		mu.Unlock()
		io.WriteString(w, r.URL.Path)
	}))
	raw := "GET /a HTTP/1.1\r\nHost: x\r\n\r\n" +
		"GET /b HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" +
		"GET /d HTTP/1.1\r\nHost: x\r\n\r\n"
	got := exchangeRaw(t, addr, raw, "GET", "GET", "POST", "GET")
	for i, path := range []string{"/a", "/b", "/c", "/d"} {
		if got[i].Status != 200 || got[i].Body != path {
			t.Errorf("response %d: %d %q, want 200 %q", i, got[i].Status, got[i].Body, path)
		}
	}
	want := []string{`GET /a "" *edge.fastResponse`, `GET /b "" *edge.fastResponse`, `POST /c "hello" *http.response`, `GET /d "" *http.response`}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("served %q, want %q", seen, want)
	}
}

func TestNetHTTPAnswersTheHeadsTheFastPathRefuses(t *testing.T) {
	_, addr := serveFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%T", w)
	}))
	for name, c := range map[string]struct {
		raw    string
		status int
	}{
		"two Host lines":       {"GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400},
		"no Host":              {"GET / HTTP/1.1\r\n\r\n", 400},
		"a bad Host":           {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		"a bad field name":     {"GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", 400},
		"an Expect":            {"GET / HTTP/1.1\r\nHost: a\r\nExpect: something\r\n\r\n", 417},
		"HTTP/1.0":             {"GET / HTTP/1.0\r\n\r\n", 200},
		"an absolute target":   {"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 200},
		"a head over 4 KiB":    {"GET / HTTP/1.1\r\nHost: a\r\nX-Long: " + strings.Repeat("y", 5000) + "\r\n\r\n", 200},
		"a malformed request":  {"GET /\r\n\r\n", 400},
		"bare LF line endings": {"GET / HTTP/1.1\nHost: a\n\n", 200},
	} {
		t.Run(name, func(t *testing.T) {
			got := exchangeRaw(t, addr, c.raw, "GET")
			if got[0].Status != c.status {
				t.Fatalf("status %d %q, want %d", got[0].Status, got[0].Body, c.status)
			}
			if c.status == 200 && name != "bare LF line endings" && got[0].Body != "*http.response" {
				t.Errorf("served by %s, want net/http", got[0].Body)
			}
		})
	}
}

func TestAClientThatLeavesCancelsItsRequestOnTheFastPath(t *testing.T) {
	started := make(chan struct{})
	cancelled := make(chan time.Duration, 1)
	_, addr := serveFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		begin := time.Now()
		close(started)
		select {
		case <-r.Context().Done():
			cancelled <- time.Since(begin)
		case <-time.After(10 * time.Second):
			cancelled <- -1
		}
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	<-started
	c.Close()
	if d := <-cancelled; d < 0 {
		t.Fatal("the request went on after its client left")
	}
}

func TestAPipelinedRequestIsNoDeparture(t *testing.T) {
	_, addr := serveFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			select {
			case <-r.Context().Done():
				io.WriteString(w, "cancelled")
				return
			case <-time.After(5 * departureWatchAfter):
			}
		}
		io.WriteString(w, r.URL.Path)
	}))
	got := exchangeRaw(t, addr, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n", "GET", "GET")
	if got[0].Body != "/slow" || got[1].Body != "/next" {
		t.Fatalf("bodies %q and %q, want /slow and /next", got[0].Body, got[1].Body)
	}
}

func TestShutdownClosesIdleFastConnectionsAndFinishesBusyOnes(t *testing.T) {
	release := make(chan struct{})
	busy := make(chan struct{})
	srv, addr := serveFast(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			close(busy)
			<-release
		}
		io.WriteString(w, "done")
	}))
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	io.WriteString(idle, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
	idleReader := bufio.NewReader(idle)
	res, err := http.ReadResponse(idleReader, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("first response: %v", err)
	}
	io.ReadAll(res.Body)
	active, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer active.Close()
	io.WriteString(active, "GET /busy HTTP/1.1\r\nHost: x\r\n\r\n")
	<-busy
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idleReader.ReadByte(); err != io.EOF {
		t.Fatalf("the idle connection: %v, want it closed", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	res, err = http.ReadResponse(bufio.NewReader(active), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if string(body) != "done" || !res.Close {
		t.Errorf("the busy request: %q, close %v; want done, close", body, res.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// echo answers with what it saw of the request, so that two servers'
// answers differ when the requests their handler saw differ.
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(w, "%s %s %s host=%q close=%v length=%d te=%q body=%q err=%v\n",
		r.Method, r.RequestURI, r.Proto, r.Host, r.Close, r.ContentLength, r.TransferEncoding, body, err != nil)
	for _, k := range keys {
		fmt.Fprintf(w, "%s=%q\n", k, r.Header[k])
	}
}

// answersTo sends raw on a new connection to addr, half-closes it and
// reads every response until the server closes: each in short, the
// first error as the last line.
func answersTo(t *testing.T, addr string, raw []byte) []string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		c.Write(raw)
		c.(*net.TCPConn).CloseWrite()
	}()
	// Responses are read as answers to the requests Go's parser finds in
	// raw: a HEAD's has no body.
	var methods []string
	in := bufio.NewReader(bytes.NewReader(raw))
	for {
		req, err := http.ReadRequest(in)
		if err != nil {
			break
		}
		methods = append(methods, req.Method)
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			break
		}
	}
	br := bufio.NewReader(c)
	var out []string
	for {
		req := &http.Request{Method: http.MethodGet}
		if len(out) < len(methods) {
			req.Method = methods[len(out)]
		}
		res, err := http.ReadResponse(br, req)
		if err != nil {
			if err != io.EOF {
				out = append(out, "error")
			}
			return out
		}
		body, err := io.ReadAll(res.Body)
		res.Header.Del("Date")
		out = append(out, fmt.Sprintf("%d %v %q %v %v %v", res.StatusCode, res.Header, body, res.Trailer, res.Close, err != nil))
	}
}

// FuzzFastPath holds the fast path to net/http's server: any bytes a
// client sends get the same answers from a public server with it as from
// the same server without it (net/http's alone, behind the same framing
// listener and check).
func FuzzFastPath(f *testing.F) {
	for _, seed := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b?x=1 HTTP/1.1\r\nHost: b\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nPOST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /after HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nFolded: x\r\n y\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\n\n",
		"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://a/x HTTP/1.1\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: Close 0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nConnection: x\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +0\r\n\r\n",
		"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	fast := testPublicServer(http.HandlerFunc(echo))
	fastLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go fast.Serve(newFramingListener(fastLn, nil, 0))
	defer fast.Close()
	plain := testPublicServer(http.HandlerFunc(echo)).srv
	plainLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go plain.Serve(newFramingListener(plainLn, nil, 0))
	defer plain.Close()
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 16<<10 {
			return
		}
		want := answersTo(t, plainLn.Addr().String(), raw)
		got := answersTo(t, fastLn.Addr().String(), raw)
		if !slices.Equal(got, want) {
			t.Fatalf("for %q\nthe fast path answered\n%s\nnet/http\n%s", raw, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}
