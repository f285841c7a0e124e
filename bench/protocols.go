package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// The protocols mode drives one gateway (memory limiter, the main mode's
// file but on HTTPS with http3 = true) over HTTP/2 and over HTTP/3 with
// the same load: protocolConns connections of protocolStreams requests in
// flight each, from Go clients in the harness's own process (net/http's
// for HTTP/2, quic-go's for HTTP/3). What it compares is the gateway's CPU
// time per request, from /proc, in interleaved rounds.
const (
	protocolConns   = 4
	protocolStreams = 16
)

// protocolSample is one run of one protocol.
type protocolSample struct {
	requests      int64
	seconds       float64
	cpuMicros     float64 // the gateway's, per request
	failedRequest int64
}

func (h *harness) runProtocols(ctx context.Context, stdout io.Writer) error {
	certFile, keyFile, pool, err := writeBenchCertificate(h.dir)
	if err != nil {
		return err
	}
	listen, err := freeAddr()
	if err != nil {
		return err
	}
	admin, err := freeAddr()
	if err != nil {
		return err
	}
	conf := gatewayConfig("main", "gateway-memory", listen, admin, h.upstreamAddr, "", h.s.dedup, false)
	conf = strings.Replace(conf, fmt.Sprintf("  http             = %q\n", listen), fmt.Sprintf("  https            = %q\n  http3            = true\n", listen), 1)
	conf += fmt.Sprintf("\ntls {\n  certificate {\n    cert_file = %q\n    key_file  = %q\n  }\n}\n", certFile, keyFile)
	path := filepath.Join(h.dir, "gateway-protocols.hcl")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return err
	}
	p, err := h.start("gateway-protocols", h.pin.argv(proxyCPU, h.gatewayBin, "run", "-config", path), filepath.Join(h.dir, "gateway-protocols.log"))
	if err != nil {
		return err
	}
	if err := waitHTTP(ctx, p, "http://"+admin+"/readyz", isOK, 20*time.Second); err != nil {
		return err
	}
	url := "https://" + listen + "/"
	tlsConfig := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	clients := map[string]func() (http.RoundTripper, func()){
		"HTTP/2": func() (http.RoundTripper, func()) {
			t := &http.Transport{TLSClientConfig: tlsConfig.Clone(), ForceAttemptHTTP2: true, MaxConnsPerHost: 1}
			return t, t.CloseIdleConnections
		},
		"HTTP/3": func() (http.RoundTripper, func()) {
			t := &http3.Transport{TLSClientConfig: tlsConfig.Clone()}
			return t, func() { t.Close() }
		},
	}
	samples := map[string][]protocolSample{}
	var ratios []float64
	for round := 1; round <= h.s.rounds; round++ {
		// Every other round in the reverse order, as in the other modes.
		order := []string{"HTTP/2", "HTTP/3"}
		if round%2 == 0 {
			order[0], order[1] = order[1], order[0]
		}
		got := map[string]protocolSample{}
		for _, proto := range order {
			s, err := driveProtocol(ctx, p.pid(), url, clients[proto], h.s.warmup, h.s.duration)
			if err != nil {
				return fmt.Errorf("%s: %w", proto, err)
			}
			h.logf("protocols round %d/%d %-6s %7.0f req/s  gateway cpu %5.1fµs/req  failed %d", round, h.s.rounds, proto,
				float64(s.requests)/s.seconds, s.cpuMicros, s.failedRequest)
			samples[proto] = append(samples[proto], s)
			got[proto] = s
		}
		ratios = append(ratios, got["HTTP/3"].cpuMicros/got["HTTP/2"].cpuMicros)
	}
	fmt.Fprintf(stdout, "\n### HTTP/3 against HTTP/2 (%d connections × %d requests in flight, %d rounds of %s)\n\n", protocolConns, protocolStreams, h.s.rounds, h.s.duration)
	fmt.Fprintln(stdout, "| protocol | req/s | gateway CPU µs/req |")
	fmt.Fprintln(stdout, "| --- | ---: | ---: |")
	for _, proto := range []string{"HTTP/2", "HTTP/3"} {
		var rates, cpus []float64
		for _, s := range samples[proto] {
			rates = append(rates, float64(s.requests)/s.seconds)
			cpus = append(cpus, s.cpuMicros)
		}
		fmt.Fprintf(stdout, "| %s | %.0f | %.1f |\n", proto, median(rates), median(cpus))
	}
	fmt.Fprintf(stdout, "\nHTTP/3 ÷ HTTP/2, gateway CPU per request (median of the rounds' own ratios): %.2f\n", median(ratios))
	return nil
}

// driveProtocol warms up, then drives url for d with fresh clients of one
// protocol and returns the requests answered and the CPU time the
// gateway process (pid) took for them.
func driveProtocol(ctx context.Context, pid int, url string, newClient func() (http.RoundTripper, func()), warmup, d time.Duration) (protocolSample, error) {
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	var transports []http.RoundTripper
	for range protocolConns {
		rt, closeIt := newClient()
		transports = append(transports, rt)
		closers = append(closers, closeIt)
	}
	run := func(d time.Duration) (ok, failed int64) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		var wg sync.WaitGroup
		var okN, failedN atomic.Int64
		for _, rt := range transports {
			client := &http.Client{Transport: rt, Timeout: 10 * time.Second}
			for range protocolStreams {
				wg.Go(func() {
					for ctx.Err() == nil {
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
						res, err := client.Do(req)
						if err != nil {
							if ctx.Err() == nil {
								failedN.Add(1)
							}
							continue
						}
						io.Copy(io.Discard, res.Body)
						res.Body.Close()
						if res.StatusCode == http.StatusOK {
							okN.Add(1)
						} else {
							failedN.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		return okN.Load(), failedN.Load()
	}
	run(warmup)
	if ctx.Err() != nil {
		return protocolSample{}, ctx.Err()
	}
	before, err := gatewayTicks(pid)
	if err != nil {
		return protocolSample{}, err
	}
	started := time.Now()
	ok, failed := run(d)
	seconds := time.Since(started).Seconds()
	after, err := gatewayTicks(pid)
	if err != nil {
		return protocolSample{}, err
	}
	if ok == 0 {
		return protocolSample{}, fmt.Errorf("no request answered 200 (%d failed)", failed)
	}
	cpu := float64(after-before) / clockTicksPerSecond
	return protocolSample{requests: ok, seconds: seconds, cpuMicros: cpu / float64(ok) * 1e6, failedRequest: failed}, ctx.Err()
}

func gatewayTicks(pid int) (int64, error) {
	t, err := readProcessTable()
	if err != nil {
		return 0, err
	}
	ticks, ok := t.treeTicks(pid)
	if !ok {
		return 0, fmt.Errorf("the gateway (pid %d) is gone", pid)
	}
	return ticks.all, nil
}

// writeBenchCertificate writes a self-signed certificate for localhost and
// 127.0.0.1 into dir, and returns its files and a pool that trusts it.
func writeBenchCertificate(dir string) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "bench-cert.pem"), filepath.Join(dir, "bench-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	leaf, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(leaf)
	return certFile, keyFile, pool, nil
}
