package edge_test

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/edge"
)

// dialFrom opens a connection from a loopback address of its own, so that
// one test plays several clients.
func dialFrom(t *testing.T, local string, addr net.Addr) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func get(t *testing.T, c net.Conn) (*http.Response, error) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
		return nil, err
	}
	return http.ReadResponse(bufio.NewReader(c), nil)
}

// One address cannot take every connection slot.
func TestOneClientCannotTakeEverySlot(t *testing.T) {
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", MaxConnections: 10, MaxConnectionsPerClient: 3, Logger: logger}, okHandler, nil)
	addr := s.HTTPAddr()
	// 127.0.0.2 holds its three connections, slowly sending headers.
	for i := 0; i < 3; i++ {
		c := dialFrom(t, "127.0.0.2", addr)
		io.WriteString(c, "GET / HTTP/1.1\r\n")
	}
	// Its fourth is closed at once, before anything is read.
	extra := dialFrom(t, "127.0.0.2", addr)
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection past the client's cap: %v, want it closed", err)
	}
	// Another client is served meanwhile.
	if res, err := get(t, dialFrom(t, "127.0.0.3", addr)); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("another client: %v %v", res, err)
	}
	if !strings.Contains(logs.String(), "max_connections_per_client") {
		t.Errorf("the refusal was not logged:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "127.0.0.2") {
		t.Errorf("the log names the client:\n%s", logs.String())
	}
}

// A client whose connection closes gets its place back.
func TestAClientsPlaceIsFreedWhenItsConnectionCloses(t *testing.T) {
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", MaxConnectionsPerClient: 1}, okHandler, nil)
	first := dialFrom(t, "127.0.0.4", s.HTTPAddr())
	if res, err := get(t, first); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("first: %v %v", res, err)
	}
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := get(t, dialFrom(t, "127.0.0.4", s.HTTPAddr()))
		if err == nil && res.StatusCode == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the place was never freed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A hijacked connection (an upgraded tunnel) keeps its place under both
// caps until it is closed.
func TestAHijackedConnectionStillCounts(t *testing.T) {
	release := make(chan struct{})
	hijack := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tunnel" {
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		brw.Flush()
		<-release
		c.Close()
	})
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", MaxConnections: 1}, hijack, nil)
	tunnel := dialFrom(t, "127.0.0.5", s.HTTPAddr())
	io.WriteString(tunnel, "GET /tunnel HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	if res, err := http.ReadResponse(bufio.NewReader(tunnel), nil); err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("tunnel: %v %v", res, err)
	}
	second := dialFrom(t, "127.0.0.6", s.HTTPAddr())
	io.WriteString(second, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(second)
	second.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("served while the tunnel held the only slot: %v", err)
	}
	close(release)
	second.SetReadDeadline(time.Now().Add(10 * time.Second))
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("after the tunnel closed: %v %v", res, err)
	}
}

// A trusted proxy carries every client's connections from its own address:
// the per-client cap would cap them all together, so it does not apply.
func TestATrustedProxyIsNotHeldToTheClientCap(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.7/32")}
	s, _ := serve(t, edge.Options{HTTP: "127.0.0.1:0", MaxConnectionsPerClient: 2, TrustedProxies: trusted}, okHandler, nil)
	for i := range 4 {
		if res, err := get(t, dialFrom(t, "127.0.0.7", s.HTTPAddr())); err != nil || res.StatusCode != http.StatusOK {
			t.Fatalf("the proxy's connection %d: %v %v", i+1, res, err)
		}
	}
	// Anyone else still is.
	for i := 0; i < 2; i++ {
		io.WriteString(dialFrom(t, "127.0.0.8", s.HTTPAddr()), "GET / HTTP/1.1\r\n")
	}
	extra := dialFrom(t, "127.0.0.8", s.HTTPAddr())
	extra.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection past the client's cap: %v, want it closed", err)
	}
}
