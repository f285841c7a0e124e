package edge_test

import (
	"context"
	"encoding/binary"
	"errors"
	"go/build"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/edgegate/gateway/edge"
)

// headersFrame is an HTTP/3 HEADERS frame holding the field section block.
func headersFrame(block []byte) []byte {
	b := quicvarint.Append(nil, 0x01)
	b = quicvarint.Append(b, uint64(len(block)))
	return append(b, block...)
}

// qpackInteropBlocks are the header blocks of the QPACK interop vector the
// qpack module (a dependency of quic-go's http3) ships: Facebook's request
// headers as the "hq" encoder wrote them, static table only. Each record is
// a stream ID (8 bytes), a length (4 bytes) and the block. None when the
// module is not in the module cache.
func qpackInteropBlocks(t testing.TB) [][]byte {
	// The version go.mod requires: the one in the module cache.
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	var version string
	for line := range strings.SplitSeq(string(mod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/quic-go/qpack" {
			version = f[1]
		}
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		cache = filepath.Join(build.Default.GOPATH, "pkg", "mod")
	}
	raw, err := os.ReadFile(filepath.Join(cache, "github.com", "quic-go", "qpack@"+version, "example", "fb-req-hq.out.0.0.0"))
	if err != nil {
		t.Logf("no QPACK interop vector: %v", err)
		return nil
	}
	var blocks [][]byte
	for len(raw) >= 12 {
		n := int(binary.BigEndian.Uint32(raw[8:12]))
		if len(raw) < 12+n {
			break
		}
		blocks = append(blocks, raw[12:12+n])
		raw = raw[12+n:]
	}
	return blocks
}

// h3Target is a live HTTP/3 server and a client that feeds it streams.
type h3Target struct {
	servers *edge.Servers
	client  *quicClient
	conn    *quic.Conn
	cc      *http3.ClientConn
	udp     net.PacketConn // sends raw datagrams to the server
}

func newH3Target(tb testing.TB) *h3Target {
	cert := newCertificate(tb)
	s, err := edge.Listen(edge.Options{HTTPS: "127.0.0.1:0", HTTP3: true, ReadHeaderTimeout: time.Second,
		TLS: &edge.TLSOptions{Certificates: []edge.CertificateFiles{cert.files}}}, okHandler, nil)
	if err != nil {
		tb.Fatal(err)
	}
	s.Serve()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return &h3Target{servers: s, client: newQUICClient(tb, "127.0.0.1", roots(cert)), udp: udp}
}

// connection is the client's connection, dialed again once the server
// closed the last one (as it must for some malformed streams).
func (h *h3Target) connection(tb testing.TB) (*quic.Conn, *http3.ClientConn) {
	if h.conn != nil && h.conn.Context().Err() == nil {
		return h.conn, h.cc
	}
	conn, err := h.client.dial(h.servers.HTTP3Addr(), nil)
	if err != nil {
		tb.Fatalf("the server takes no new connection: %v", err)
	}
	h.conn, h.cc = conn, (&http3.Transport{}).NewClientConn(conn)
	return h.conn, h.cc
}

// feed sends data as a raw datagram to the server's port, and as the
// whole of a stream: a request stream when kind is even, else a
// unidirectional one (whose first bytes are its type). It fails the test
// when the server neither answers nor resets the stream nor closes the
// connection within a few seconds.
func (h *h3Target) feed(tb testing.TB, kind byte, data []byte) {
	h.udp.WriteTo(data, h.servers.HTTP3Addr())
	conn, _ := h.connection(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if kind%2 == 1 {
		str, err := conn.OpenUniStreamSync(ctx)
		if err != nil {
			return // the connection is gone: the next feed dials again
		}
		str.Write(data)
		str.Close()
		return
	}
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return
	}
	str.Write(data)
	str.Close()
	str.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.Copy(io.Discard, str)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		tb.Fatalf("the server neither answered nor reset a stream of %x", data)
	}
}

// alive fails the test unless a well-formed request is served.
func (h *h3Target) alive(tb testing.TB) {
	_, cc := h.connection(tb)
	req, _ := http.NewRequest(http.MethodGet, "https://localhost/", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := cc.RoundTrip(req.WithContext(ctx))
	if err != nil {
		// The connection may have been closed for the last input just
		// now: a new one must be served.
		h.conn = nil
		_, cc = h.connection(tb)
		if res, err = cc.RoundTrip(req.WithContext(ctx)); err != nil {
			tb.Fatalf("a request after the input: %v", err)
		}
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		tb.Fatalf("a request after the input: %d", res.StatusCode)
	}
}

// settled fails the test unless every stream the server handled has
// ended: no request stream handler, and no unidirectional one but the
// client's control stream, are left running.
func (h *h3Target) settled(tb testing.TB) {
	var requests, unidirectional int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		requests, unidirectional = 0, 0
		for _, g := range quicGoroutines() {
			if strings.Contains(g, "http3.(*RawServerConn).HandleRequestStream") {
				requests++
			}
			if strings.Contains(g, "http3.(*RawServerConn).HandleUnidirectionalStream") {
				unidirectional++
			}
		}
		if requests == 0 && unidirectional <= 1 {
			return
		}
	}
	tb.Fatalf("%d request and %d unidirectional stream handlers still running", requests, unidirectional)
}

// stop drains the server and checks that nothing of it or of quic-go is
// left running.
func (h *h3Target) stop(tb testing.TB) {
	// A client closes its connection once it has seen GOAWAY and has no
	// request left: the drain waits for it (or for shutdown_timeout).
	if h.conn != nil {
		h.conn.CloseWithError(0, "")
	}
	h.client.close()
	h.udp.Close()
	if err := h.servers.Shutdown(); err != nil {
		tb.Errorf("Shutdown: %v", err)
	}
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if left = quicGoroutines(); len(left) == 0 {
			return
		}
	}
	tb.Errorf("goroutines of quic-go or package edge still running:\n%s", strings.Join(left, "\n\n"))
}

// FuzzHTTP3Streams feeds malformed HTTP/3 frames to a live server over a
// real QUIC connection, each input as a request or unidirectional stream
// and as a raw datagram, and checks that every stream ends, a well-formed
// request is still served after it and leaves no stream handler running,
// and that once drained nothing is left running. Its seeds hold every request of the QPACK interop vector.
func FuzzHTTP3Streams(f *testing.F) {
	for _, b := range qpackInteropBlocks(f) {
		f.Add(byte(0), headersFrame(b))
	}
	// :method GET, :scheme https, :path / (static table), :authority "a".
	get := []byte{0x00, 0x00, 0xd1, 0xd7, 0xc1, 0x50, 0x01, 'a'}
	for _, seed := range []struct {
		kind byte
		data []byte
	}{
		{0, headersFrame(get)},
		{0, append(headersFrame(get), 0x00, 0x03, 'a', 'b', 'c')},         // a DATA frame after it
		{0, append(headersFrame(get), 0x00, 0x40, 0x10, 'a')},             // a DATA frame cut short
		{0, append(headersFrame(get), headersFrame(get)...)},              // trailers that are a request
		{0, []byte{0x00, 0x01, 'x'}},                                      // DATA before HEADERS
		{0, []byte{0x04, 0x00}},                                           // SETTINGS on a request stream
		{0, []byte{0x07, 0x01, 0x00}},                                     // GOAWAY on a request stream
		{0, []byte{0x21, 0x00}},                                           // a reserved frame type
		{0, headersFrame([]byte{0x00, 0x00, 0xff, 0xff, 0xff, 0x7f})},     // a static index out of range
		{0, headersFrame([]byte{0x05, 0x00, 0x80})},                       // a dynamic table reference without a table
		{0, headersFrame([]byte{0x00, 0x00, 0x5f, 0x1d, 0xff})},           // a literal longer than its frame
		{0, []byte{0x01, 0xbf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}, // a HEADERS frame of 2^62-1 bytes
		{0, headersFrame([]byte{0x00, 0x00, 0xd1, 0xd7})},                 // no :path
		{1, []byte{0x00, 0x04, 0x00}},                                     // a second control stream
		{1, []byte{0x02, 0x3f, 0xe1, 0x1f}},                               // an encoder stream setting a table we did not allow
		{1, []byte{0x03, 0x80}},                                           // a decoder stream acknowledging nothing
		{1, []byte{0x01, 0x00}},                                           // a push stream from a client
		{1, []byte{0x54}},                                                 // an unknown stream type
		{0, []byte{0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}},       // an Initial-looking datagram
	} {
		f.Add(seed.kind, seed.data)
	}
	h := newH3Target(f)
	f.Cleanup(func() { h.stop(f) })
	f.Fuzz(func(t *testing.T, kind byte, data []byte) {
		h.feed(t, kind, data)
		h.alive(t)
		h.settled(t)
	})
}
