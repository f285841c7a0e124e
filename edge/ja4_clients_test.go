package edge_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgegate/gateway/edge"
)

// wireHello is a ClientHello's fields as read off the wire by this test's
// own parser, not by crypto/tls.
type wireHello struct {
	legacyVersion uint16
	versions      []uint16
	ciphers       []uint16
	extensions    []uint16
	signatures    []uint16
	alpn          []string
}

// ja4 is the fingerprint of h, computed from the wire's fields.
func (h wireHello) ja4() string {
	versions := h.versions
	if len(versions) == 0 {
		versions = []uint16{h.legacyVersion}
	}
	return edge.JA4Of(false, versions, h.ciphers, h.extensions, h.signatures, h.alpn)
}

// reader reads big-endian fields of a byte string, failing softly.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.err = errors.New("short ClientHello")
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() int {
	b := r.take(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}
func (r *reader) u16() int {
	b := r.take(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}
func (r *reader) u24() int {
	b := r.take(3)
	if b == nil {
		return 0
	}
	return int(b[0])<<16 | int(b[1])<<8 | int(b[2])
}

// vector reads a field of the length its lenBytes (1 or 2) say.
func (r *reader) vector(lenBytes int) *reader {
	n := r.u16
	if lenBytes == 1 {
		n = r.u8
	}
	return &reader{b: r.take(n()), err: r.err}
}
func (r *reader) u16s() []uint16 {
	var out []uint16
	for len(r.b) >= 2 {
		out = append(out, uint16(r.u16()))
	}
	return out
}

// parseClientHello reads the ClientHello at the start of a client's
// first bytes (its handshake records, joined).
func parseClientHello(stream []byte) (wireHello, error) {
	var handshake []byte
	for len(stream) >= 5 && stream[0] == 22 {
		n := int(binary.BigEndian.Uint16(stream[3:5]))
		if len(stream) < 5+n {
			break
		}
		handshake = append(handshake, stream[5:5+n]...)
		stream = stream[5+n:]
	}
	r := &reader{b: handshake}
	if r.u8() != 1 {
		return wireHello{}, errors.New("not a ClientHello")
	}
	r = &reader{b: r.take(r.u24()), err: r.err}
	var h wireHello
	h.legacyVersion = uint16(r.u16())
	r.take(32)
	r.take(r.u8()) // session ID
	h.ciphers = r.vector(2).u16s()
	r.take(r.u8()) // compression methods
	exts := r.vector(2)
	for exts.err == nil && len(exts.b) > 0 {
		typ := uint16(exts.u16())
		data := exts.vector(2)
		h.extensions = append(h.extensions, typ)
		switch typ {
		case 0x002b: // supported_versions
			h.versions = data.vector(1).u16s()
		case 0x000d: // signature_algorithms
			h.signatures = data.vector(2).u16s()
		case 0x0010: // ALPN
			list := data.vector(2)
			for list.err == nil && len(list.b) > 0 {
				h.alpn = append(h.alpn, string(list.take(list.u8())))
			}
		}
	}
	if r.err != nil || exts.err != nil {
		return wireHello{}, errors.New("malformed ClientHello")
	}
	return h, nil
}

// tee is a TCP relay to target that keeps the first bytes each client
// sends, so a test reads the ClientHello the gateway was sent.
type tee struct {
	ln     net.Listener
	mu     sync.Mutex
	hellos [][]byte
}

func startTee(t *testing.T, target string) *tee {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tt := &tee{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go tt.relay(c, target)
		}
	}()
	return tt
}

func (tt *tee) relay(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	var first []byte
	seen := false
	go func() {
		io.Copy(c, up)
		c.Close()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if !seen && len(first) < 64<<10 {
				first = append(first, buf[:n]...)
				if _, perr := parseClientHello(first); perr == nil {
					seen = true
					tt.mu.Lock()
					tt.hellos = append(tt.hellos, first)
					tt.mu.Unlock()
				}
			}
			if _, werr := up.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (tt *tee) last(t *testing.T) wireHello {
	t.Helper()
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if len(tt.hellos) == 0 {
		t.Fatal("no ClientHello seen")
	}
	h, err := parseClientHello(tt.hellos[len(tt.hellos)-1])
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The fingerprint the gateway computes from crypto/tls's view of the
// ClientHello is the one computed from the bytes on the wire, for Go's
// client, curl and openssl s_client, with SNI and without.
func TestJA4OfRealClients(t *testing.T) {
	cert := newCertificate(t)
	public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ja4="+edge.JA4(r.Context())+"\n")
	})
	s, _ := serve(t, edge.Options{HTTPS: "127.0.0.1:0", TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, public, nil)
	tt := startTee(t, s.HTTPSAddr().String())
	port := tt.ln.Addr().(*net.TCPAddr).Port
	host := map[bool]string{true: "localhost", false: "127.0.0.1"}
	clients := map[string]func(t *testing.T, sni bool) string{
		"go": func(t *testing.T, sni bool) string {
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots(cert)}, ForceAttemptHTTP2: true}}
			res, err := c.Get("https://" + host[sni] + ":" + strconv.Itoa(port) + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			return string(b)
		},
		"curl": func(t *testing.T, sni bool) string {
			return run(t, "curl", "-sS", "--cacert", cert.files.CertFile, "https://"+host[sni]+":"+strconv.Itoa(port)+"/")
		},
		"openssl": func(t *testing.T, sni bool) string {
			args := []string{"s_client", "-connect", "127.0.0.1:" + strconv.Itoa(port), "-CAfile", cert.files.CertFile, "-quiet", "-alpn", "http/1.1"}
			if sni {
				args = append(args, "-servername", "localhost")
			} else {
				args = append(args, "-noservername")
			}
			return runInput(t, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", "openssl", args...)
		},
	}
	for name, get := range clients {
		for _, sni := range []bool{true, false} {
			t.Run(name+map[bool]string{true: " with SNI", false: " without SNI"}[sni], func(t *testing.T) {
				if _, err := exec.LookPath(name); name != "go" && err != nil {
					t.Skipf("%s is not installed", name)
				}
				body := get(t, sni)
				_, got, _ := strings.Cut(body, "ja4=")
				got, _, _ = strings.Cut(got, "\n")
				want := tt.last(t).ja4()
				if got != want || len(got) != 36 {
					t.Fatalf("the gateway saw %q, the wire says %q", got, want)
				}
				if sni != (got[3] == 'd') {
					t.Fatalf("SNI %v, fingerprint %s", sni, got)
				}
				t.Logf("%s: %s", name, got)
			})
		}
	}
}

func run(t *testing.T, name string, args ...string) string { return runInput(t, "", name, args...) }

func runInput(t *testing.T, input, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return string(out)
}

// Over HTTP/3 the fingerprint is the QUIC handshake's: q, TLS 1.3, h3,
// and the same for every connection of one client.
func TestJA4OverHTTP3(t *testing.T) {
	public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, edge.JA4(r.Context()))
	})
	s, pool := serveHTTP3(t, edge.Options{}, public)
	c := newQUICClient(t, "127.0.0.1", pool)
	var seen []string
	for range 2 {
		conn, err := c.dial(s.HTTP3Addr(), nil)
		if err != nil {
			t.Fatal(err)
		}
		status, body, err := h3Get(conn)
		conn.CloseWithError(0, "")
		if err != nil || status != 200 {
			t.Fatalf("status %d, %v", status, err)
		}
		seen = append(seen, body)
	}
	if got := seen[0]; len(got) != 36 || !strings.HasPrefix(got, "q13d") || got[8:10] != "h3" || seen[1] != got {
		t.Fatalf("fingerprints %q", seen)
	}
}
