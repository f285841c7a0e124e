package edge

import (
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/subject"
)

// Options configure the listeners: the listen block and the tls block. Zero
// values take the defaults. Listen validates them and reports every problem
// at once, before anything is bound.
type Options struct {
	// HTTP is the public plain-HTTP listener, host:port; empty: none, or
	// DefaultHTTP when HTTPS is empty too.
	HTTP  string
	HTTPS string // public HTTPS listener, host:port; needs TLS
	// HTTP3 serves HTTP/3 over QUIC on the HTTPS listener's port (UDP) too,
	// with its certificates, caps and timeouts, and announces it in
	// Alt-Svc on the HTTPS listener's HTTP/1.1 and HTTP/2 responses. Needs
	// HTTPS.
	HTTP3 bool
	// Admin is the admin listener. It serves the admin handler with the
	// admin timeouts (read header 5s, idle 1m) and none of the public
	// protections: no connection cap, no framing check. Empty: none.
	Admin string
	// RateLimitGRPC is the listener of Envoy's rate limit service, served
	// by the server given to Servers.ServeRateLimit, host:port; empty:
	// none. With RateLimitGRPCTLS it speaks TLS with the HTTPS listener's
	// certificates (needs HTTPS).
	RateLimitGRPC    string
	RateLimitGRPCTLS bool

	// ShutdownTimeout is how long Shutdown lets requests in flight finish.
	// Default 15s; negative: none, connections are closed at once.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers, and on HTTPS
	// the TLS handshake too. Default 10s; else at least MinTimeout.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default
	// 120s; else at least MinTimeout.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers. Default 64 KiB; else at
	// least MinMaxHeaderBytes.
	MaxHeaderBytes int
	// MaxConnections caps the open connections of each public listener; the
	// next waits in the kernel's backlog (over QUIC it is refused). Default
	// 10000; negative: no cap.
	MaxConnections int
	// MaxConnectionsPerClient caps the open connections of one client on
	// each public listener: an IPv4 address, or an IPv6 prefix of
	// ClientIPv6Prefix bits. The peer address counts (the cap applies
	// before any header is read). Its next connection is closed at once.
	// Default 256; negative: no cap.
	MaxConnectionsPerClient int
	// TrustedProxies are peers MaxConnectionsPerClient does not apply to:
	// a load balancer or proxy in front carries every client's
	// connections from its own address. They stay under MaxConnections.
	TrustedProxies []netip.Prefix
	// ClientIPv6Prefix is the prefix length of one IPv6 client, as the
	// client-IP subject's; default DefaultClientIPv6Prefix.
	ClientIPv6Prefix int

	// TLS is the tls block. nil: no HTTPS. HTTPS and TLS go together:
	// either without the other is an error.
	TLS *TLSOptions
	// Logger receives the servers' error logs (at Warn), framing refusals
	// and certmagic's messages. nil discards them.
	Logger *slog.Logger
	// Registerer receives the listeners' metrics
	// (gateway_framing_refusals_total{reason}); nil registers none.
	Registerer prometheus.Registerer
}

// TLSOptions is the tls block.
type TLSOptions struct {
	// RedirectHTTP makes the plain-HTTP listener answer every request with
	// a 308 to the same URL on the HTTPS listener's port. ACME HTTP-01
	// challenges are still answered.
	RedirectHTTP          bool
	HSTSMaxAge            time.Duration // 0: no Strict-Transport-Security; else at least MinHSTSMaxAge
	HSTSIncludeSubdomains bool
	ACME                  *ACMEOptions // nil: static certificates only
	// Certificates are loaded by Listen; any unreadable pair fails it.
	// Static certificates win over ACME ones for the names they cover.
	Certificates []CertificateFiles
	// ClientCAs are the roots of the client certificates the HTTPS
	// listener asks for (mutual TLS); nil: it asks for none. ClientAuth
	// says what a handshake without a certificate that verifies gets:
	// ClientAuthRequire (the default) or ClientAuthRequest.
	ClientCAs  *x509.CertPool
	ClientAuth string
}

// Defaults of Options: what a zero field takes.
const (
	DefaultShutdownTimeout   = 15 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	DefaultMaxHeaderBytes    = 64 << 10
	DefaultMaxConnections    = 10000
	DefaultMaxPerClient      = 256
	DefaultClientIPv6Prefix  = subject.DefaultIPv6Prefix
)

// The least of ReadHeaderTimeout and IdleTimeout, and of MaxHeaderBytes,
// when set.
const (
	MinTimeout        = time.Millisecond
	MinMaxHeaderBytes = 1024
)

// MinHSTSMaxAge is the least TLSOptions.HSTSMaxAge may be when set: the
// header counts whole seconds.
const MinHSTSMaxAge = time.Second

// DefaultHTTP is the public listener of Options that name none.
const DefaultHTTP = ":8080"

// The admin listener answers operators and probes, not clients: tighter
// timeouts than the public ones, fixed.
const (
	adminReadHeaderTimeout = 5 * time.Second
	adminIdleTimeout       = time.Minute
)

// withDefaults fills the zero values.
func (o Options) withDefaults() Options {
	if o.HTTP == "" && o.HTTPS == "" {
		o.HTTP = DefaultHTTP
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.MaxConnectionsPerClient == 0 {
		o.MaxConnectionsPerClient = DefaultMaxPerClient
	}
	if o.ClientIPv6Prefix == 0 {
		o.ClientIPv6Prefix = DefaultClientIPv6Prefix
	}
	return o
}

// Validate reports every problem of o, each a *option.Error, joined. It reads
// no file: what the TLS block names is checked when Listen loads it.
func (o Options) Validate() error {
	var errs []error
	problem := func(field, summary, detail string, args ...any) {
		errs = append(errs, &option.Error{Field: field, Summary: summary, Detail: fmt.Sprintf(detail, args...)})
	}
	if o.HTTPS != "" && o.TLS == nil {
		problem("listen", "HTTPS without TLS", "listen.https needs a tls block with acme or certificate.")
	}
	if o.HTTP3 && o.HTTPS == "" {
		problem("listen.http3", "HTTP/3 without HTTPS", "http3 needs listen.https: HTTP/3 is served on its port, with its certificates.")
	}
	if o.TLS != nil && o.HTTPS == "" {
		problem("tls", "TLS without HTTPS", "A tls block needs listen.https.")
	}
	if o.RateLimitGRPCTLS && (o.HTTPS == "" || o.RateLimitGRPC == "") {
		problem("listen.ratelimit_grpc_tls", "ratelimit_grpc_tls without HTTPS", "ratelimit_grpc_tls needs listen.ratelimit_grpc and listen.https: it serves with the HTTPS listener's certificates.")
	}
	for _, a := range []struct{ name, value string }{{"http", o.HTTP}, {"https", o.HTTPS}, {"admin", o.Admin}, {"ratelimit_grpc", o.RateLimitGRPC}} {
		if a.value != "" && !validListenAddr(a.value) {
			problem("listen."+a.name, "Invalid listen address", "%s must be host:port, such as \":8080\" or \"127.0.0.1:9901\".", a.name)
		}
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"read_header_timeout", o.ReadHeaderTimeout}, {"idle_timeout", o.IdleTimeout}} {
		if d.value != 0 && d.value < MinTimeout {
			problem("listen."+d.name, "Duration too short", "%s must be at least %s.", d.name, MinTimeout)
		}
	}
	if o.MaxHeaderBytes != 0 && o.MaxHeaderBytes < MinMaxHeaderBytes {
		problem("listen.max_header_bytes", "Value too small", "max_header_bytes must be at least %d.", MinMaxHeaderBytes)
	}
	if o.ClientIPv6Prefix != 0 && !subject.ValidIPv6Prefix(o.ClientIPv6Prefix) {
		problem("subject.ipv6_prefix", "Invalid prefix length", "ipv6_prefix must be between 1 and 128.")
	}
	t := o.TLS
	if t == nil {
		return errors.Join(errs...)
	}
	if t.HSTSMaxAge != 0 && t.HSTSMaxAge < MinHSTSMaxAge {
		problem("tls.hsts_max_age", "Duration too short", "hsts_max_age must be at least %s.", MinHSTSMaxAge)
	}
	switch {
	case t.ClientAuth != "" && t.ClientAuth != ClientAuthRequest && t.ClientAuth != ClientAuthRequire:
		problem("tls.client_auth", "Unknown client_auth", "client_auth is %q or %q, not %q.", ClientAuthRequest, ClientAuthRequire, t.ClientAuth)
	case t.ClientAuth != "" && t.ClientCAs == nil:
		problem("tls.client_auth", "client_auth without client_ca_file", "client_auth needs client_ca_file: the roots client certificates must chain to.")
	}
	if t.ACME == nil && len(t.Certificates) == 0 {
		problem("tls", "No certificate source", "tls needs an acme block, one or more certificate blocks, or both.")
	}
	a := t.ACME
	if a == nil {
		return errors.Join(errs...)
	}
	for i, d := range a.Domains {
		if d == "" || strings.ContainsAny(d, " /:*") {
			problem(fmt.Sprintf("tls.acme.domains[%d]", i), "Invalid domain", "%q is not a domain name the gateway can get a certificate for.", d)
		}
	}
	if len(a.Domains) == 0 {
		problem("tls.acme.domains", "No domains", "acme.domains needs at least one domain.")
	}
	for i, c := range a.Challenges {
		if c != ChallengeHTTP01 && c != ChallengeTLSALPN01 {
			problem(fmt.Sprintf("tls.acme.challenges[%d]", i), "Unknown ACME challenge", "Challenges are %q and %q, not %q.", ChallengeHTTP01, ChallengeTLSALPN01, c)
		}
	}
	if !a.allows(ChallengeTLSALPN01) && a.allows(ChallengeHTTP01) && o.HTTP == "" {
		problem("tls.acme.challenges", "HTTP-01 without an HTTP listener", "acme.challenges allows only http-01, which needs listen.http.")
	}
	if a.CA != "" {
		if u, err := url.Parse(a.CA); err != nil || u.Scheme != "https" || u.Host == "" {
			problem("tls.acme.ca", "Invalid ACME directory", "acme.ca must be an https:// URL.")
		}
	}
	return errors.Join(errs...)
}

// validListenAddr reports whether s is an optional host, a colon and a
// port number.
func validListenAddr(s string) bool {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return false
	}
	port, err := strconv.Atoi(s[i+1:])
	return err == nil && port >= 0 && port <= 65535
}

// validate is Validate, and that each listener has its handler.
func (o Options) validate(public, admin http.Handler) error {
	errs := []error{o.Validate()}
	if (o.HTTP != "" || o.HTTPS != "") && public == nil {
		errs = append(errs, errors.New("the public listeners need a handler"))
	}
	// A nil handler would make http.Server serve http.DefaultServeMux.
	if o.Admin != "" && admin == nil {
		errs = append(errs, errors.New("the admin listener needs a handler"))
	}
	return errors.Join(errs...)
}
