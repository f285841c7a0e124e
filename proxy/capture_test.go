package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The HTTP/1 server's writer is wrapped by the capture's own h1Writer,
// without an allocation, keeping its interfaces; what goes through it is
// counted.
func TestCaptureWrapsHTTP1WriterWithoutAllocating(t *testing.T) {
	done := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := captures.Get().(*capture)
		allocs := testing.AllocsPerRun(100, func() { c.wrap(w) })
		ww := c.wrap(w)
		_, hj := ww.(http.Hijacker)
		_, fl := ww.(http.Flusher)
		_, push := ww.(http.Pusher)
		rf, ok := ww.(io.ReaderFrom)
		switch {
		case allocs != 0:
			done <- "wrap allocated"
		case !hj || !fl || !ok || push:
			done <- "the wrapper lost or added an interface"
		default:
			ww.WriteHeader(http.StatusCreated)
			io.WriteString(ww, "ab")
			rf.ReadFrom(strings.NewReader("cde"))
			if code, n := c.result(); code != http.StatusCreated || n != 5 {
				done <- "captured the wrong status or size"
			} else {
				done <- ""
			}
		}
		c.done()
	}))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if msg := <-done; msg != "" {
		t.Fatal(msg)
	}
	if res.StatusCode != http.StatusCreated || string(body) != "abcde" {
		t.Fatalf("got %d %q", res.StatusCode, body)
	}
}
