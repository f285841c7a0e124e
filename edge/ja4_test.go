package edge_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/edgegate/gateway/edge"
)

// hexValues parses "1301,1302" into its values.
func hexValues(t *testing.T, list string) []uint16 {
	t.Helper()
	var out []uint16
	for v := range strings.SplitSeq(list, ",") {
		var n uint16
		if _, err := fmt.Sscanf(v, "%04x", &n); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		out = append(out, n)
	}
	return out
}

func schemes(values []uint16) []tls.SignatureScheme {
	out := make([]tls.SignatureScheme, len(values))
	for i, v := range values {
		out[i] = tls.SignatureScheme(v)
	}
	return out
}

// The example of FoxIO's JA4 specification, and the sorted lists it
// hashes, in the order the ClientHello sent them.
const (
	specCiphers    = "1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035"
	specExtensions = "001b,0000,0033,0010,4469,0017,002d,000d,0005,0023,0012,002b,ff01,000b,000a,0015"
	specSignatures = "0403,0804,0401,0503,0805,0501,0806,0601"
)

func specHello(t *testing.T) *tls.ClientHelloInfo {
	return &tls.ClientHelloInfo{
		CipherSuites:      hexValues(t, specCiphers),
		Extensions:        hexValues(t, specExtensions),
		SignatureSchemes:  schemes(hexValues(t, specSignatures)),
		SupportedVersions: []uint16{tls.VersionTLS13, tls.VersionTLS12},
		SupportedProtos:   []string{"h2", "http/1.1"},
		ServerName:        "example.com",
	}
}

func TestJA4PublishedVectors(t *testing.T) {
	hello := specHello(t)
	if got := edge.JA4(false, hello); got != "t13d1516h2_8daaf6152771_e5627efa2ab1" {
		t.Errorf("the specification's example: %s", got)
	}
	// Without signature algorithms the extension list is hashed alone.
	hello.SignatureSchemes = nil
	if got := edge.JA4(false, hello); got != "t13d1516h2_8daaf6152771_6d807ffa2a79" {
		t.Errorf("the specification's example without signature algorithms: %s", got)
	}
	// A Chrome ClientHello as published with its JA4 (original order).
	chrome := &tls.ClientHelloInfo{
		CipherSuites:      hexValues(t, specCiphers),
		Extensions:        hexValues(t, "002d,0033,0010,fe0d,0017,44cd,0000,000b,000a,002b,ff01,0023,0012,0005,000d,001b"),
		SignatureSchemes:  schemes(hexValues(t, specSignatures)),
		SupportedVersions: []uint16{tls.VersionTLS13, tls.VersionTLS12},
		SupportedProtos:   []string{"h2", "http/1.1"},
	}
	if got := edge.JA4(false, chrome); got != "t13d1516h2_8daaf6152771_d8a2da3f94cd" {
		t.Errorf("a published Chrome hello: %s", got)
	}
}

func TestJA4IgnoresGREASEAndReadsEachField(t *testing.T) {
	base := edge.JA4(false, specHello(t))
	greased := specHello(t)
	greased.CipherSuites = append([]uint16{0x0a0a}, greased.CipherSuites...)
	greased.Extensions = append([]uint16{0x3a3a}, append(greased.Extensions, 0xfafa)...)
	greased.SupportedVersions = append([]uint16{0x7a7a}, greased.SupportedVersions...)
	greased.SignatureSchemes = append([]tls.SignatureScheme{0x1a1a}, greased.SignatureSchemes...)
	if got := edge.JA4(false, greased); got != base {
		t.Fatalf("GREASE changed the fingerprint: %s, want %s", got, base)
	}
	for _, c := range []struct {
		name   string
		change func(*tls.ClientHelloInfo)
		want   string
	}{
		{"QUIC", func(h *tls.ClientHelloInfo) {}, "q13d1516h2_"},
		{"no SNI extension", func(h *tls.ClientHelloInfo) {
			h.Extensions = slices.DeleteFunc(h.Extensions, func(e uint16) bool { return e == 0 })
		}, "t13i1515h2_"},
		{"TLS 1.2 only", func(h *tls.ClientHelloInfo) { h.SupportedVersions = []uint16{tls.VersionTLS12} }, "t12d1516h2_"},
		{"an unknown version", func(h *tls.ClientHelloInfo) { h.SupportedVersions = []uint16{0x0305} }, "t00d1516h2_"},
		{"no ALPN", func(h *tls.ClientHelloInfo) { h.SupportedProtos = nil }, "t13d151600_"},
		{"http/1.1 first", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"http/1.1"} }, "t13d1516h1_"},
		{"a one-letter protocol", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"x"} }, "t13d1516xx_"},
		{"a protocol of 0xAB", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"\xab"} }, "t13d1516ab_"},
		{"a protocol of 0xAB 0xCD", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"\xab\xcd"} }, "t13d1516ad_"},
		{"a protocol of 0x30 0xAB", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"0\xab"} }, "t13d1516" + "3b_"},
		{"a protocol of 0x30 0x31 0xAB 0xCD", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"01\xab\xcd"} }, "t13d1516" + "3d_"},
		{"a protocol of 0x30 0xAB 0xCD 0x31", func(h *tls.ClientHelloInfo) { h.SupportedProtos = []string{"0\xab\xcd1"} }, "t13d1516" + "01_"},
		{"no ciphers and no extensions", func(h *tls.ClientHelloInfo) { h.CipherSuites, h.Extensions = nil, nil }, "t13i0000h2_000000000000_000000000000"},
		{"over 99 ciphers", func(h *tls.ClientHelloInfo) {
			for i := range 120 {
				h.CipherSuites = append(h.CipherSuites, uint16(0x1000+i))
			}
		}, "t13d9916h2_"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := specHello(t)
			c.change(h)
			if got := edge.JA4(c.name == "QUIC", h); !strings.HasPrefix(got, c.want) {
				t.Fatalf("%s, want it to begin %s", got, c.want)
			}
		})
	}
}

// FuzzJA4 builds ClientHellos of any ciphers, extensions (GREASE, unknown,
// repeated), versions, signature algorithms and ALPN values: JA4 always
// has its form, and GREASE added anywhere changes nothing.
func FuzzJA4(f *testing.F) {
	f.Add([]byte{0x13, 0x01, 0x0a, 0x0a}, []byte{0x00, 0x00, 0x00, 0x10, 0xfa, 0xfa}, []byte{0x03, 0x04}, []byte{0x04, 0x03}, "h2", true)
	f.Add([]byte{}, []byte{0xff, 0xff, 0x00, 0x00, 0x00, 0x00}, []byte{0xfe, 0xfd}, []byte{}, "\x00", false)
	f.Add([]byte{0x00}, []byte{0x44}, []byte{0x2a}, []byte{0x08}, "", false)
	form := regexp.MustCompile(`^[tq](13|12|11|10|s3|s2|d1|d2|d3|00)[di]\d{4}[0-9A-Za-z]{2}_[0-9a-f]{12}_[0-9a-f]{12}$`)
	f.Fuzz(func(t *testing.T, ciphers, extensions, versions, signatures []byte, alpn string, quic bool) {
		words := func(b []byte) []uint16 {
			out := make([]uint16, 0, len(b)/2)
			for i := 0; i+1 < len(b); i += 2 {
				out = append(out, binary.BigEndian.Uint16(b[i:]))
			}
			return out
		}
		hello := &tls.ClientHelloInfo{CipherSuites: words(ciphers), Extensions: words(extensions),
			SupportedVersions: words(versions), SignatureSchemes: schemes(words(signatures))}
		if alpn != "" {
			hello.SupportedProtos = strings.Split(alpn, ",")
		}
		got := edge.JA4(quic, hello)
		if !form.MatchString(got) {
			t.Fatalf("%q has not the form of a JA4", got)
		}
		grease := func(v []uint16) []uint16 { return append(append([]uint16{0x2a2a}, v...), 0xdada) }
		hello.CipherSuites, hello.Extensions, hello.SupportedVersions = grease(hello.CipherSuites), grease(hello.Extensions), grease(hello.SupportedVersions)
		hello.SignatureSchemes = append(hello.SignatureSchemes, 0x9a9a)
		if again := edge.JA4(quic, hello); again != got {
			t.Fatalf("GREASE changed %s into %s", got, again)
		}
	})
}

// helloRecorder relays TCP connections to target and keeps the first TLS
// record each client sent: its ClientHello.
type helloRecorder struct {
	ln     net.Listener
	mu     sync.Mutex
	hellos [][]byte
}

func recordHellos(t *testing.T, target string) *helloRecorder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &helloRecorder{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go r.relay(c, target)
		}
	}()
	return r
}

func (r *helloRecorder) relay(c net.Conn, target string) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	in := bufio.NewReader(c)
	head, err := in.Peek(5)
	if err != nil {
		return
	}
	record, err := in.Peek(5 + int(binary.BigEndian.Uint16(head[3:])))
	if err != nil {
		return
	}
	r.mu.Lock()
	r.hellos = append(r.hellos, slices.Clone(record))
	r.mu.Unlock()
	go func() { io.Copy(c, up); c.Close() }()
	io.Copy(up, in)
}

func (r *helloRecorder) last(t *testing.T) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.hellos) == 0 {
		t.Fatal("no ClientHello recorded")
	}
	return r.hellos[len(r.hellos)-1]
}

// wireJA4 is the JA4 of a ClientHello record, read from its bytes and
// worked out as text, apart from edge.JA4 and from crypto/tls.
func wireJA4(t *testing.T, record []byte) string {
	t.Helper()
	b := record[5+4:] // record and handshake headers
	legacy := binary.BigEndian.Uint16(b)
	b = b[2+32:]
	b = b[1+int(b[0]):] // session ID
	n := int(binary.BigEndian.Uint16(b))
	var ciphers []string
	for i := 0; i < n; i += 2 {
		if v := binary.BigEndian.Uint16(b[2+i:]); !greased(v) {
			ciphers = append(ciphers, fmt.Sprintf("%04x", v))
		}
	}
	b = b[2+n:]
	b = b[1+int(b[0]):] // compression methods
	b = b[2:]
	var extensions, signatures []string
	version, sni, alpn := legacy, "i", "00"
	for len(b) >= 4 {
		typ, size := binary.BigEndian.Uint16(b), int(binary.BigEndian.Uint16(b[2:]))
		data := b[4 : 4+size]
		b = b[4+size:]
		if greased(typ) {
			continue
		}
		extensions = append(extensions, fmt.Sprintf("%04x", typ))
		switch typ {
		case 0x0000:
			sni = "d"
		case 0x0010:
			if p := data[3 : 3+int(data[2])]; len(p) > 0 {
				alpn = string([]byte{p[0], p[len(p)-1]})
			}
		case 0x000d:
			for i := 2; i < len(data); i += 2 {
				if v := binary.BigEndian.Uint16(data[i:]); !greased(v) {
					signatures = append(signatures, fmt.Sprintf("%04x", v))
				}
			}
		case 0x002b:
			version = 0
			for i := 1; i < len(data); i += 2 {
				if v := binary.BigEndian.Uint16(data[i:]); !greased(v) && v > version {
					version = v
				}
			}
		}
	}
	versions := map[uint16]string{0x0304: "13", 0x0303: "12", 0x0302: "11", 0x0301: "10"}
	a := fmt.Sprintf("t%s%s%02d%02d%s", versions[version], sni, min(len(ciphers), 99), min(len(extensions), 99), alpn)
	slices.Sort(ciphers)
	hashed := slices.DeleteFunc(slices.Clone(extensions), func(e string) bool { return e == "0000" || e == "0010" })
	slices.Sort(hashed)
	c := strings.Join(hashed, ",")
	if len(signatures) > 0 {
		c += "_" + strings.Join(signatures, ",")
	}
	return a + "_" + short(strings.Join(ciphers, ",")) + "_" + short(c)
}

func greased(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }

func short(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:12]
}

// The fingerprint a request sees is the JA4 of the ClientHello its client
// sent, on HTTP/1.1 and HTTP/2 over TLS from Go, curl and openssl, and a
// QUIC one over HTTP/3; a plain-HTTP request has none.
func TestJA4OfRealClients(t *testing.T) {
	cert := newCertificate(t)
	public := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ja4="+edge.JA4Of(r.Context()))
	})
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", HTTPS: "127.0.0.1:0", HTTP3: true,
		TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, public, nil)
	relay := recordHellos(t, s.HTTPSAddr().String())
	url := "https://localhost:" + fmt.Sprint(portOf(relay.ln.Addr())) + "/"
	served := func(t *testing.T, body string) string {
		t.Helper()
		_, ja4, ok := strings.Cut(strings.TrimSpace(body), "ja4=")
		if !ok {
			t.Fatalf("answer %q", body)
		}
		return ja4
	}
	check := func(t *testing.T, body string) {
		t.Helper()
		if got, want := served(t, body), wireJA4(t, relay.last(t)); got != want {
			t.Fatalf("served %s, the ClientHello's is %s", got, want)
		}
	}
	for _, c := range []struct {
		name  string
		proto string
		tr    *http.Transport
	}{
		{"Go over HTTP/2", "HTTP/2.0", &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots(cert)}}},
		{"Go over HTTP/1.1", "HTTP/1.1", &http.Transport{TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}, TLSClientConfig: &tls.Config{RootCAs: roots(cert)}}},
		{"Go over TLS 1.2", "HTTP/2.0", &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: roots(cert), MaxVersion: tls.VersionTLS12}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, err := (&http.Client{Transport: c.tr}).Get(url)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			c.tr.CloseIdleConnections()
			if res.Proto != c.proto {
				t.Fatalf("spoke %s", res.Proto)
			}
			check(t, string(body))
		})
	}
	t.Run("curl", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Skip("no curl")
		}
		out, err := exec.Command("curl", "-sS", "--cacert", cert.files.CertFile, url).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		check(t, string(out))
	})
	t.Run("openssl", func(t *testing.T) {
		if _, err := exec.LookPath("openssl"); err != nil {
			t.Skip("no openssl")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "openssl", "s_client", "-quiet", "-connect", relay.ln.Addr().String(), "-servername", "localhost", "-CAfile", cert.files.CertFile)
		cmd.Stdin = strings.NewReader("GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
		out, err := cmd.Output()
		if err != nil && !strings.Contains(string(out), "ja4=") {
			t.Fatalf("%v: %s", err, out)
		}
		check(t, string(out))
	})
	t.Run("HTTP/3", func(t *testing.T) {
		tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots(cert)}}
		defer tr.Close()
		res, err := (&http.Client{Transport: tr}).Get("https://localhost:" + fmt.Sprint(s.HTTP3Addr().(*net.UDPAddr).Port) + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if got := served(t, string(body)); !regexp.MustCompile(`^q13d\d{4}h3_[0-9a-f]{12}_[0-9a-f]{12}$`).MatchString(got) {
			t.Fatalf("HTTP/3 request's fingerprint %q", got)
		}
	})
	t.Run("plain HTTP", func(t *testing.T) {
		res, err := http.Get("http://" + s.HTTPAddr().String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if got := served(t, string(body)); got != "" {
			t.Fatalf("a plain-HTTP request has the fingerprint %q", got)
		}
	})
}
