package main

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// mtlsH3Client speaks HTTP/3 (quic-go's client) presenting cert, or no
// certificate when nil.
func (r *mtlsRunning) mtlsH3Client(t *testing.T, cert *tls.Certificate) *http.Client {
	t.Helper()
	rt := &http3.Transport{
		TLSClientConfig: r.clientConfig(cert),
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, addr, tlsCfg, cfg)
		},
	}
	t.Cleanup(func() { rt.Close() })
	return &http.Client{Transport: rt, Timeout: 10 * time.Second}
}

// Client certificates over HTTP/3: the same identity, the same budget as
// over TCP, the same refusals.
func TestMutualTLSOverHTTP3(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Join(r.Header.Values("X-Client-Cert"), ","))
	}))
	defer up.Close()
	clients := newTestCA(t)
	certA := clients.clientLeaf(t, false, "spiffe://example.org/orders", "orders.internal")
	certB := clients.clientLeaf(t, false, "spiffe://example.org/billing", "billing.internal")
	for _, mode := range []string{"require", "request"} {
		t.Run("under "+mode, func(t *testing.T) {
			dir := t.TempDir()
			caFile := filepath.Join(dir, "clients.pem")
			writeCAFile(t, caFile, clients)
			r := mtlsGateway(t, dir, caFile, mode, up.URL)
			a3, b3, a2 := r.mtlsH3Client(t, &certA), r.mtlsH3Client(t, &certB), r.mtlsClient(&certA)

			if code, got := r.call(t, a3, "/echo", "forged"); code != 200 || got != spkiOf(certA) {
				t.Fatalf("%d X-Client-Cert %q, want 200 and %q", code, got, spkiOf(certA))
			}
			// One budget per key, whichever protocol carries it.
			if got := r.statuses(t, "/spki", a2, a3, a3, b3); got != "200 200 429 200" {
				t.Fatalf("A over h2, A over h3 twice, B over h3: %s, want 200 200 429 200", got)
			}
			if !strings.Contains(r.logs.String(), `"subject_kind":"client_cert"`) {
				t.Fatalf("no request logged as client_cert:\n%s", r.logs.String())
			}

			none := r.mtlsH3Client(t, nil)
			if mode == "require" {
				req, _ := http.NewRequest("GET", "https://"+r.servers.HTTPSAddr().String()+"/echo", nil)
				if res, err := none.Do(req); err == nil {
					res.Body.Close()
					t.Fatalf("no certificate over HTTP/3 under require: %d, want the handshake refused", res.StatusCode)
				}
				return
			}
			if code, _ := r.call(t, none, "/only", ""); code != http.StatusUnauthorized {
				t.Fatalf("no certificate on a route with no other source: %d, want 401", code)
			}
			if code, got := r.call(t, none, "/echo", "forged"); code != 200 || got != "" {
				t.Fatalf("no certificate: %d X-Client-Cert %q, want 200 and none", code, got)
			}
		})
	}
}
