package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A request body read to its end reads as ended after the server has
// closed it, as the server does when the response's head is written: the
// transport's read after the declared length must not fail the request
// (golang/go#40747).
func TestAClientBodyReadToItsEndStaysEnded(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := &clientBody{ReadCloser: r.Body, rc: http.NewResponseController(w), timeout: time.Second}
		data, err := io.ReadAll(io.LimitReader(b, r.ContentLength))
		if err != nil {
			got <- err.Error()
			return
		}
		r.Body.Close()
		n, err := b.Read(make([]byte, 1))
		got <- fmt.Sprintf("%q, then %d bytes and %v", data, n, err)
	}))
	defer srv.Close()
	res, err := http.Post(srv.URL, "text/plain", strings.NewReader("a body"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if g, want := <-got, `"a body", then 0 bytes and EOF`; g != want {
		t.Errorf("read %s, want %s", g, want)
	}
}
