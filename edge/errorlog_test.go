package edge_test

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/edge"
)

func TestRedactAddresses(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http2: server: connection error from 127.0.0.1:52138: PROTOCOL_ERROR", "http2: server: connection error from [address]: PROTOCOL_ERROR"},
		{"http: TLS handshake error from [2001:db8::7]:443: EOF", "http: TLS handshake error from [address]: EOF"},
		{"read tcp 10.0.0.1:8080->203.0.113.9:61000: i/o timeout", "read tcp [address]->[address]: i/o timeout"},
		{"peer ::1 went away.", "peer [address] went away."},
		{"client 198.51.100.4.", "client [address]."},
		{"a dead beef cafe: 1.26 HTTP/1.1 deadline", "a dead beef cafe: 1.26 HTTP/1.1 deadline"},
	} {
		if got := edge.RedactAddresses(c.in); got != c.want {
			t.Errorf("RedactAddresses(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}

// Go's HTTP/2 server names the client in its error
// log; the gateway's log line must not.
func TestTheServersErrorLogNamesNoClient(t *testing.T) {
	cert := newCertificate(t)
	var logs lockedBuffer
	s, _ := serve(t, edge.Options{HTTPS: "127.0.0.1:0", Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, okHandler, nil)
	c, err := tls.Dial("tcp", s.HTTPSAddr().String(), &tls.Config{RootCAs: roots(cert), ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatal("no h2")
	}
	local := c.LocalAddr().(*net.TCPAddr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\nnot the HTTP/2 preface at all")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	io.Copy(io.Discard, c)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "preface") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	out := logs.String()
	if !strings.Contains(out, "preface") {
		t.Fatalf("the HTTP/2 server logged nothing about the bad preface:\n%s", out)
	}
	if strings.Contains(out, local.String()) || strings.Contains(out, "127.0.0.1") {
		t.Fatalf("the log names the client %s:\n%s", local, out)
	}
}
