package edge

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// slogCore carries certmagic's zap messages into the gateway's slog log.
type slogCore struct {
	l      *slog.Logger
	fields []zapcore.Field
}

func (c slogCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }

func (c slogCore) With(fields []zapcore.Field) zapcore.Core {
	return slogCore{l: c.l, fields: append(slices.Clone(c.fields), fields...)}
}

func (c slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range append(slices.Clone(c.fields), fields...) {
		f.AddTo(enc)
	}
	level := slog.LevelInfo
	switch {
	case e.Level >= zapcore.ErrorLevel:
		level = slog.LevelError
	case e.Level == zapcore.WarnLevel:
		level = slog.LevelWarn
	}
	attrs := []any{"component", "certmagic"}
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	c.l.Log(context.Background(), level, e.Message, attrs...)
	return nil
}

func (c slogCore) Sync() error { return nil }

// ACME challenge types, as the tls block names them.
const (
	ChallengeHTTP01    = "http-01"
	ChallengeTLSALPN01 = "tls-alpn-01"
)

// ACMEOptions configure certificates obtained from an ACME CA. The gateway
// answers the challenges on its own listeners: HTTP-01 on the plain-HTTP
// one, TLS-ALPN-01 on the HTTPS one. Listen fills in their bound ports, so
// callers never name them.
type ACMEOptions struct {
	Domains []string
	Email   string
	CA      string // directory URL; empty means Let's Encrypt production
	CARoot  string // PEM file of roots to trust for the CA (a private CA)
	Storage string // folder shared by every instance; certmagic locks in it
	// Challenges are the challenge types the CA may use, ChallengeHTTP01
	// and ChallengeTLSALPN01; empty means both. HTTP-01 also needs an HTTP
	// listener: Listen refuses a set no listener can answer.
	Challenges []string
}

func (a *ACMEOptions) allows(challenge string) bool {
	return len(a.Challenges) == 0 || slices.Contains(a.Challenges, challenge)
}

// challengePorts are the ports of the gateway's own listeners where it
// answers each challenge; 0 disables that challenge.
type challengePorts struct {
	http, tlsALPN int
}

// terminator terminates TLS for the HTTPS listener: static certificates
// first for the names they cover, then certmagic-managed ones. Only the
// configured domains are ever issued: there is no on-demand issuance, so no
// name an attacker sends in SNI makes the gateway talk to a CA.
type terminator struct {
	static  *staticCertificates
	magic   *certmagic.Config
	issuer  *certmagic.ACMEIssuer
	domains []string
	cache   *certmagic.Cache
	clients *clientAuth // nil: no client certificates asked for
}

// newTLS builds the TLS state. With acme set it does not contact the CA yet;
// manage does. logger may be nil.
func newTLS(static []tls.Certificate, clients *clientAuth, acme *ACMEOptions, ports challengePorts, logger *slog.Logger) (*terminator, error) {
	t := &terminator{static: &staticCertificates{}, clients: clients}
	t.static.swap(static)
	if acme == nil {
		return t, nil
	}
	if len(acme.Domains) == 0 {
		return nil, errors.New("edge: acme needs at least one domain")
	}
	zlog := zap.NewNop()
	if logger != nil {
		zlog = zap.New(slogCore{l: logger})
	}
	var roots *x509.CertPool
	if acme.CARoot != "" {
		pem, err := os.ReadFile(acme.CARoot)
		if err != nil {
			return nil, fmt.Errorf("edge: ca_root: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("edge: ca_root %s holds no PEM certificate", acme.CARoot)
		}
	}
	var storage certmagic.Storage = &certmagic.FileStorage{Path: acme.Storage}
	if acme.Storage == "" {
		storage = certmagic.Default.Storage
	}
	var magic *certmagic.Config
	// The cache starts its maintenance goroutine here; stop ends it.
	t.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           zlog,
	})
	magic = certmagic.New(t.cache, certmagic.Config{Storage: storage, Logger: zlog})
	ca := acme.CA
	if ca == "" {
		ca = certmagic.LetsEncryptProductionCA
	}
	t.issuer = certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:           ca,
		Email:        acme.Email,
		Agreed:       true,
		TrustedRoots: roots,
		Logger:       zlog,
		ListenHost:   "127.0.0.1",
		// The ports are taken by our listeners, so certmagic's solvers find
		// them in use and leave the answering to httpChallenge and config.
		AltHTTPPort:             ports.http,
		AltTLSALPNPort:          ports.tlsALPN,
		DisableHTTPChallenge:    ports.http == 0,
		DisableTLSALPNChallenge: ports.tlsALPN == 0,
	})
	magic.Issuers = []certmagic.Issuer{t.issuer}
	t.magic = magic
	t.domains = slices.Clone(acme.Domains)
	return t, nil
}

// manage obtains or loads the ACME certificates and keeps them renewed in
// the background until stop. A certificate another instance already put in
// the shared storage is reused, not ordered again.
func (t *terminator) manage(ctx context.Context) error {
	if t.magic == nil {
		return nil
	}
	return t.magic.ManageSync(ctx, t.domains)
}

// stop ends background renewals and waits for certmagic's maintenance
// goroutine. It must be called once.
func (t *terminator) stop() {
	if t.cache != nil {
		t.cache.Stop()
	}
}

// aeadSuites are the TLS 1.2 cipher suites of Mozilla's intermediate
// profile: ECDHE key exchange with AES-GCM or ChaCha20-Poly1305, never
// CBC. TLS 1.3 suites are not configurable and are all AEAD.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// config is the listener's tls.Config: TLS 1.2 at least, HTTP/2 and
// HTTP/1.1 by ALPN, the ACME TLS-ALPN-01 protocol when ACME is on, and
// client certificates when asked for (clientAuth.apply). Every listener
// that terminates TLS builds its own from here, so each speaks the same.
func (t *terminator) config() *tls.Config {
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		CipherSuites: aeadSuites,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	var magicTLS *tls.Config
	if t.magic != nil {
		magicTLS = t.magic.TLSConfig()
		cfg.NextProtos = append(cfg.NextProtos, "acme-tls/1")
	}
	cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := t.static.forHello(hello); c != nil && !slices.Contains(hello.SupportedProtos, "acme-tls/1") {
			return c, nil
		}
		if magicTLS != nil && t.manages(hello.ServerName) {
			return magicTLS.GetCertificate(hello)
		}
		if c := t.static.fallback(); c != nil {
			return c, nil
		}
		return nil, errNoCertificate
	}
	t.clients.apply(cfg)
	recordFingerprints(cfg)
	return cfg
}

func (t *terminator) manages(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	return slices.Contains(t.domains, name)
}

// httpChallenge wraps the plain-HTTP handler so that ACME HTTP-01
// challenges are answered before anything else.
func (t *terminator) httpChallenge(next http.Handler) http.Handler {
	if t.issuer == nil {
		return next
	}
	return t.issuer.HTTPChallengeHandler(next)
}
