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

// ACMEOptions configure certificates obtained from an ACME CA.
type ACMEOptions struct {
	Domains []string
	Email   string
	CA      string // directory URL; empty means Let's Encrypt production
	CARoot  string // PEM file of roots to trust for the CA (a private CA)
	Storage string // folder shared by every instance; certmagic locks in it
	Logger  *slog.Logger
	// HTTPPort and TLSPort are the gateway's own plain and TLS listeners,
	// where it answers HTTP-01 and TLS-ALPN-01 itself; 0 disables that
	// challenge. certmagic then never opens listeners of its own.
	HTTPPort, TLSPort int
}

// TLS terminates TLS for the HTTPS listener: static certificates first for
// the names they cover, then certmagic-managed ones. Only the configured
// domains are ever issued: there is no on-demand issuance, so no name an
// attacker sends in SNI makes the gateway talk to a CA.
type TLS struct {
	Static  *Certificates
	magic   *certmagic.Config
	issuer  *certmagic.ACMEIssuer
	domains []string
	cache   *certmagic.Cache
}

// NewTLS builds the TLS state. With acme set it does not contact the CA yet;
// Manage does.
func NewTLS(static []tls.Certificate, acme *ACMEOptions) (*TLS, error) {
	t := &TLS{Static: &Certificates{}}
	t.Static.Swap(static)
	if acme == nil {
		return t, nil
	}
	if len(acme.Domains) == 0 {
		return nil, errors.New("edge: acme needs at least one domain")
	}
	logger := zap.NewNop()
	if acme.Logger != nil {
		logger = zap.New(slogCore{l: acme.Logger})
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
	t.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           logger,
	})
	magic = certmagic.New(t.cache, certmagic.Config{Storage: storage, Logger: logger})
	ca := acme.CA
	if ca == "" {
		ca = certmagic.LetsEncryptProductionCA
	}
	t.issuer = certmagic.NewACMEIssuer(magic, certmagic.ACMEIssuer{
		CA:           ca,
		Email:        acme.Email,
		Agreed:       true,
		TrustedRoots: roots,
		Logger:       logger,
		ListenHost:   "127.0.0.1",
		// The ports are taken by our listeners, so certmagic's solvers find
		// them in use and leave the answering to HTTPChallenge and Config.
		AltHTTPPort:             acme.HTTPPort,
		AltTLSALPNPort:          acme.TLSPort,
		DisableHTTPChallenge:    acme.HTTPPort == 0,
		DisableTLSALPNChallenge: acme.TLSPort == 0,
	})
	magic.Issuers = []certmagic.Issuer{t.issuer}
	t.magic = magic
	t.domains = slices.Clone(acme.Domains)
	return t, nil
}

// Manage obtains or loads the ACME certificates and keeps them renewed in
// the background until Stop. A certificate another instance already put in
// the shared storage is reused, not ordered again.
func (t *TLS) Manage(ctx context.Context) error {
	if t.magic == nil {
		return nil
	}
	return t.magic.ManageSync(ctx, t.domains)
}

// Stop ends background renewals.
func (t *TLS) Stop() {
	if t.cache != nil {
		t.cache.Stop()
	}
}

// Config is the listener's tls.Config: TLS 1.2 at least, HTTP/2 and
// HTTP/1.1 by ALPN, and the ACME TLS-ALPN-01 protocol when ACME is on.
func (t *TLS) Config() *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
	}
	var magicTLS *tls.Config
	if t.magic != nil {
		magicTLS = t.magic.TLSConfig()
		cfg.NextProtos = append(cfg.NextProtos, "acme-tls/1")
	}
	cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if c := t.Static.forHello(hello); c != nil && !slices.Contains(hello.SupportedProtos, "acme-tls/1") {
			return c, nil
		}
		if magicTLS != nil && t.manages(hello.ServerName) {
			return magicTLS.GetCertificate(hello)
		}
		if c := t.Static.fallback(); c != nil {
			return c, nil
		}
		return nil, errNoCertificate
	}
	return cfg
}

func (t *TLS) manages(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	for _, d := range t.domains {
		if d == name {
			return true
		}
	}
	return false
}

// HTTPChallenge wraps the plain-HTTP handler so that ACME HTTP-01
// challenges are answered before anything else.
func (t *TLS) HTTPChallenge(next http.Handler) http.Handler {
	if t.issuer == nil {
		return next
	}
	return t.issuer.HTTPChallengeHandler(next)
}
