package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/edgegate/gateway/limiter/redistest"
)

// h3Client is an HTTP/3 client (quic-go's) whose packets leave from local,
// a loopback address, so that a test can play several clients.
func h3Client(t *testing.T, local, serverName string, pool *x509.CertPool) *http.Client {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP(local)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	rt := &http3.Transport{
		TLSClientConfig: &tls.Config{ServerName: serverName, RootCAs: pool},
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			a, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			return tr.Dial(ctx, a, tlsCfg, cfg)
		},
	}
	t.Cleanup(func() {
		rt.Close()
		tr.Close()
		udp.Close()
	})
	return &http.Client{Transport: rt, Timeout: 10 * time.Second}
}

// h1Client speaks HTTP/1.1 over TLS from local.
func h1Client(t *testing.T, local, serverName string, pool *x509.CertPool) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	tr := &http.Transport{
		DialContext:     d.DialContext,
		TLSClientConfig: &tls.Config{ServerName: serverName, RootCAs: pool},
		TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// writeHTTP3Config writes a gateway serving HTTPS and HTTP/3 with the
// certificate pair cert, limiter lines in the limiter block, a policy of
// one request an hour per client address on /orders, and extra blocks.
func writeHTTP3Config(t *testing.T, cert [2]string, limiterLines, upstream, extra string) string {
	t.Helper()
	return writeGateway(t, pseudonymFromFile+fmt.Sprintf(`
listen {
  https            = "127.0.0.1:0"
  http3            = true
  admin             = "127.0.0.1:0"
  shutdown_timeout  = "5s"
  body_read_timeout = "200ms"
}
tls {
  certificate {
    cert_file = %q
    key_file  = %q
  }
}
limiter {
  %s
}
policy "p" {
  algorithm = "fixed-window"
  limit     = 1
  window    = "1h"
}
route "orders" {
  path     = "/orders"
  upstream = %q
  policy   = "p"
  subject  = ["client_ip"]
}
%s
`, cert[0], cert[1], limiterLines, upstream, extra))
}

// answer is what a client sees of a response, but what differs from one
// response to the next whatever the protocol: the date and the seconds a
// window has left.
type answer struct {
	status  int
	headers []string
	body    string
}

var seconds = regexp.MustCompile(`\b(t=|^)[0-9]+\b`)

func answerOf(t *testing.T, c *http.Client, url string) answer {
	t.Helper()
	res, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: res.StatusCode, body: string(body)}
	for name, values := range res.Header {
		switch name {
		case "Date", "Alt-Svc", "Content-Length":
			continue
		case "Retry-After", "Ratelimit":
			values = []string{seconds.ReplaceAllString(strings.Join(values, ","), "${1}N")}
		}
		a.headers = append(a.headers, name+": "+strings.Join(values, ","))
	}
	slices.Sort(a.headers)
	return a
}

func (a answer) String() string {
	return fmt.Sprintf("%d\n%s\n\n%s", a.status, strings.Join(a.headers, "\n"), a.body)
}

// A client over HTTP/3 gets what one over HTTP/1.1 gets: the same status,
// headers and body, allowed, limited and refused. Each protocol's client
// comes from its own address, so each has a budget of its own.
func TestHTTP3AnswersAsHTTP1Does(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "order list")
	}))
	defer up.Close()
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile, _ := ca.leaf(t, dir, "a.test")
	cert := [2]string{certFile, keyFile}

	compare := func(t *testing.T, r *running, wantStatuses ...int) {
		t.Helper()
		url := "https://" + r.servers.HTTPSAddr().String() + "/orders"
		overH1 := h1Client(t, "127.0.0.2", "a.test", ca.pool)
		overH3 := h3Client(t, "127.0.0.3", "a.test", ca.pool)
		for _, want := range wantStatuses {
			h1, h3 := answerOf(t, overH1, url), answerOf(t, overH3, url)
			if h1.status != want {
				t.Fatalf("HTTP/1.1: %d, want %d", h1.status, want)
			}
			if h1.String() != h3.String() {
				t.Fatalf("HTTP/3 answered\n%s\n\nHTTP/1.1 answered\n%s", h3, h1)
			}
		}
	}
	t.Run("200 and then 429 carry the same headers and body", func(t *testing.T) {
		r := startFile(t, writeHTTP3Config(t, cert, `backend = "memory"`, up.URL, ""))
		compare(t, r, http.StatusOK, http.StatusTooManyRequests)
		r.stop(t, 10*time.Second)
	})
	t.Run("a 503 of a limiter that cannot answer carries the same headers and body", func(t *testing.T) {
		s := redistest.Start(t)
		s.Kill()
		r := startFile(t, writeHTTP3Config(t, cert, fmt.Sprintf(`backend = "redis"
  redis { addrs = [%q] }`, s.Addr), up.URL, ""))
		compare(t, r, http.StatusServiceUnavailable)
		r.stop(t, 10*time.Second)
	})
}

// The HTTPS listener's HTTP/1.1 and HTTP/2 responses announce HTTP/3 on
// its port, and never the upstream's own alternatives.
func TestHTTPSAnnouncesHTTP3(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", `h3=":9999"; ma=60`)
	}))
	defer up.Close()
	ca := newTestCA(t)
	certFile, keyFile, _ := ca.leaf(t, t.TempDir(), "a.test")
	r := startFile(t, writeHTTP3Config(t, [2]string{certFile, keyFile}, `backend = "memory"`, up.URL, ""))
	addr := r.servers.HTTPSAddr().String()
	_, port, _ := net.SplitHostPort(addr)
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{ServerName: "a.test", RootCAs: ca.pool}, ForceAttemptHTTP2: true}}
	defer h2.CloseIdleConnections()
	for name, c := range map[string]*http.Client{"HTTP/1.1": h1Client(t, "127.0.0.1", "a.test", ca.pool), "HTTP/2": h2} {
		res, err := c.Get("https://" + addr + "/orders")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if want := `h3=":` + port + `"; ma=86400`; strings.Join(res.Header.Values("Alt-Svc"), ", ") != want {
			t.Fatalf("%s (%s): Alt-Svc %q, want %q", name, res.Proto, res.Header.Values("Alt-Svc"), want)
		}
	}
	if got := r.servers.HTTP3Addr().String(); got != addr {
		t.Fatalf("HTTP/3 on %s, HTTPS on %s", got, addr)
	}
}

// A client that stops sending its request body over HTTP/3 is answered
// 408, as over HTTP/1.1 and HTTP/2, and the upstream never gets it.
func TestHTTP3BodyReadTimeout(t *testing.T) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err == nil {
			reached.Add(1)
		}
	}))
	defer up.Close()
	ca := newTestCA(t)
	certFile, keyFile, _ := ca.leaf(t, t.TempDir(), "a.test")
	r := startFile(t, writeHTTP3Config(t, [2]string{certFile, keyFile}, `backend = "memory"`, up.URL, ""))
	body, stalled := io.Pipe()
	defer stalled.Close()
	req, _ := http.NewRequest(http.MethodPost, "https://"+r.servers.HTTPSAddr().String()+"/orders", body)
	go io.WriteString(stalled, "part of the body")
	res, err := h3Client(t, "127.0.0.1", "a.test", ca.pool).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || res.ProtoMajor != 3 {
		t.Fatalf("%s %d, want HTTP/3 408", res.Proto, res.StatusCode)
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the upstream read %d whole bodies", n)
	}
}

// A request over HTTP/3 has its server span say so.
func TestHTTP3SpansSayProtocolVersion3(t *testing.T) {
	receiver := newOTLPReceiver(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	ca := newTestCA(t)
	certFile, keyFile, _ := ca.leaf(t, t.TempDir(), "a.test")
	r := startFile(t, writeHTTP3Config(t, [2]string{certFile, keyFile}, `backend = "memory"`, up.URL,
		fmt.Sprintf("telemetry {\n  otlp_endpoint = %q\n}", receiver.URL)))
	res, err := h3Client(t, "127.0.0.1", "a.test", ca.pool).Get("https://" + r.servers.HTTPSAddr().String() + "/orders")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	r.stop(t, 10*time.Second)
	spans, _ := receiver.received()
	var versions []string
	for _, s := range spans {
		if strings.HasSuffix(s.Name, " orders") {
			versions = append(versions, attrValue(s.Attributes, "network.protocol.version"))
		}
	}
	if len(versions) != 1 || versions[0] != "3" {
		t.Fatalf("server spans' network.protocol.version %q, want one \"3\"", versions)
	}
}

// A reload keeps the HTTP/3 listener: a request in flight over it
// finishes on the configuration it started with, and the next one is
// served by the new one.
func TestHTTP3AcrossAReload(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		io.WriteString(w, "old")
	}))
	defer old.Close()
	defer close(release)
	fresh := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "new") }))
	defer fresh.Close()
	ca := newTestCA(t)
	cert := [2]string{}
	cert[0], cert[1], _ = ca.leaf(t, t.TempDir(), "a.test")
	path := writeHTTP3Config(t, cert, `backend = "memory"`, old.URL, "")
	r := startFile(t, path)
	url := "https://" + r.servers.HTTPSAddr().String() + "/orders"

	type result struct {
		body string
		err  error
	}
	inFlight := make(chan result, 1)
	client := h3Client(t, "127.0.0.2", "a.test", ca.pool)
	go func() {
		res, err := client.Get(url)
		if err != nil {
			inFlight <- result{err: err}
			return
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		inFlight <- result{string(b), err}
	}()
	<-entered
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(src), old.URL, fresh.URL, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	r.reload(t, "ok")
	res, err := h3Client(t, "127.0.0.3", "a.test", ca.pool).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "new" {
		t.Fatalf("after the reload: %d %q, want the new upstream's", res.StatusCode, body)
	}
	release <- struct{}{}
	if got := <-inFlight; got.err != nil || got.body != "old" {
		t.Fatalf("the request in flight across the reload got %q, %v", got.body, got.err)
	}
}

// What a library writes through the standard logger (quic-go's warning
// about UDP buffers) lands in the JSON log, without client addresses.
func TestTheStandardLoggerWritesIntoTheJSONLog(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	r := start(t, up.URL)
	log.Printf("failed to sufficiently increase receive buffer size, peer 203.0.113.7:443")
	r.stop(t, 10*time.Second)
	logs := r.logs.String()
	if !strings.Contains(logs, `"level":"WARN","msg":"failed to sufficiently increase receive buffer size, peer [address]"`) {
		t.Fatalf("the standard logger's line is not a JSON line of the gateway's log:\n%s", logs)
	}
}
