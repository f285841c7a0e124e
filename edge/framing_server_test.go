package edge_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/edge"
)

// recorder is a public handler that notes the path of every request it
// serves, reads the body and answers 200 with the path.
type recorder struct {
	mu    sync.Mutex
	paths []string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	rec.mu.Lock()
	rec.paths = append(rec.paths, r.URL.Path)
	rec.mu.Unlock()
	io.WriteString(w, r.URL.Path)
}

func (rec *recorder) seen() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.paths)
}

// exchange writes payload on one new connection and reads responses until
// the server closes it or stays silent for a second. It returns each
// response's status, with "+close" when the response announced the close.
func exchange(t *testing.T, dial func() (net.Conn, error), payload string) []string {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, payload); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var got []string
	for {
		c.SetReadDeadline(time.Now().Add(time.Second))
		res, err := http.ReadResponse(br, nil)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
			return got
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) {
				return got // a reset: the server closed
			}
			t.Fatalf("after %v: %v", got, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		s := fmt.Sprint(res.StatusCode)
		if res.Close {
			s += "+close"
		}
		got = append(got, s)
	}
}

const smuggledCLTE = "POST /second HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"

// TestFramingCheckCannotBeSwitchedOff:
// nothing a client sends earlier on a connection makes the framing check
// let a later request through, and no request it cannot follow is served
// with the connection kept open.
func TestFramingCheckCannotBeSwitchedOff(t *testing.T) {
	cert := newCertificate(t)
	rec := &recorder{}
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", HTTPS: "127.0.0.1:0",
		TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, rec, nil)
	dials := []struct {
		name string
		dial func() (net.Conn, error)
	}{
		{"on the plain listener", func() (net.Conn, error) { return net.Dial("tcp", s.HTTPAddr().String()) }},
		{"on the HTTPS listener", func() (net.Conn, error) {
			return tls.Dial("tcp", s.HTTPSAddr().String(), &tls.Config{RootCAs: roots(cert), ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		}},
	}
	cases := []struct {
		name    string
		payload string
		// served are the paths the handler may see, in order; statuses
		// the responses the client must get.
		served   []string
		statuses []string
	}{
		{
			name:     "a bare Upgrade header, then a request with both framings (the issue's sequence)",
			payload:  "GET /first HTTP/1.1\r\nHost: x\r\nUpgrade: foo\r\n\r\n" + smuggledCLTE,
			served:   []string{"/first"},
			statuses: []string{"200+close"},
		},
		{
			name:     "a WebSocket upgrade the handler declines, then a request with both framings",
			payload:  "GET /first HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" + smuggledCLTE,
			served:   []string{"/first"},
			statuses: []string{"200+close"},
		},
		{
			name:     "Transfer-Encoding on an obs-fold line, then a request with both framings",
			payload:  "POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n" + smuggledCLTE,
			served:   nil,
			statuses: []string{"400+close"},
		},
		{
			name:     "OPTIONS *, then a request with both framings, then an innocent one",
			payload:  "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" + smuggledCLTE + "GET /innocent HTTP/1.1\r\nHost: x\r\n\r\n",
			served:   nil,
			statuses: []string{"200", "400+close"},
		},
		{
			name:     "OPTIONS * twice between clean requests",
			payload:  "GET /a HTTP/1.1\r\nHost: x\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			served:   []string{"/a", "/b"},
			statuses: []string{"200", "200", "200", "200+close"},
		},
		{
			name: "HTTP/1.0 with Transfer-Encoding and a body that is a request",
			payload: "POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
			served:   nil,
			statuses: []string{"400+close"},
		},
		{
			name:     "HTTP/1.0 with Transfer-Encoding, then a request with both framings",
			payload:  "POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n" + smuggledCLTE,
			served:   nil,
			statuses: []string{"400+close"},
		},
	}
	for _, d := range dials {
		for _, c := range cases {
			t.Run(c.name+" "+d.name, func(t *testing.T) {
				before := len(rec.seen())
				statuses := exchange(t, d.dial, c.payload)
				served := rec.seen()[before:]
				if !slices.Equal(served, c.served) || !slices.Equal(statuses, c.statuses) {
					t.Fatalf("handler served %q and the client got %q; want %q and %q", served, statuses, c.served, c.statuses)
				}
			})
		}
	}
}

func TestAnAcceptedUpgradeBecomesATunnelTheCheckLeavesAlone(t *testing.T) {
	tunnel := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			io.WriteString(w, "no upgrade")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw) // echo until the client closes
	})
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0"}, tunnel, nil)
	c, err := net.Dial("tcp", s.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /tunnel HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols || res.Close {
		t.Fatalf("%v, %v: want 101 without Connection: close", res, err)
	}
	// Bytes in the tunnel are not HTTP: nothing refuses them.
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, smuggledCLTE)
	got := make([]byte, len(smuggledCLTE))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != smuggledCLTE {
		t.Fatalf("echoed %q, %v", got, err)
	}
}

func TestFramingRefusalsAreCountedAndLoggedWithoutTheAddress(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", Registerer: reg, Logger: logger}, &recorder{}, nil)
	dial := func() (net.Conn, error) { return net.Dial("tcp", s.HTTPAddr().String()) }
	for _, payload := range []string{
		smuggledCLTE, smuggledCLTE,
		"POST /a HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		if got := exchange(t, dial, payload); !slices.Equal(got, []string{"400+close"}) {
			t.Fatalf("%q: %v, want one 400 that closes", payload, got)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "gateway_framing_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			counts[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	if counts["conflicting_framing"] != 2 || counts["http10_transfer_encoding"] != 1 || counts["obs_fold"] != 0 {
		t.Fatalf("refusals counted %v", counts)
	}
	out := logs.String()
	// One line per reason a second: the second conflicting request is
	// counted, not logged.
	if n := strings.Count(out, `"reason":"conflicting_framing"`); n != 1 {
		t.Fatalf("%d log lines for conflicting framing:\n%s", n, out)
	}
	if !strings.Contains(out, `"reason":"http10_transfer_encoding"`) || strings.Contains(out, "127.0.0.1") {
		t.Fatalf("the log has no line for the HTTP/1.0 refusal, or has the client's address:\n%s", out)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
