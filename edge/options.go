package edge

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	// Admin is the admin listener. It serves the admin handler with the
	// admin timeouts (read header 5s, idle 1m) and none of the public
	// protections: no connection cap, no framing check. Empty: none.
	Admin string

	// ShutdownTimeout is how long Shutdown lets requests in flight finish.
	// Default 15s; negative: none, connections are closed at once.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout bounds reading a request's headers, and on HTTPS
	// the TLS handshake too. Default 10s.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration // keep-alive connections idle this long are closed; default 120s
	MaxHeaderBytes    int           // default 64 KiB
	// MaxConnections caps the open connections of each public listener; the
	// next waits in the kernel's backlog. Default 10000; negative: no cap.
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
	HSTSMaxAge            time.Duration // 0: no Strict-Transport-Security
	HSTSIncludeSubdomains bool
	ACME                  *ACMEOptions // nil: static certificates only
	// Certificates are loaded by Listen; any unreadable pair fails it.
	// Static certificates win over ACME ones for the names they cover.
	Certificates []CertificateFiles
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

// validate reports every problem of o, or nil. It reads no file: what the
// TLS block names is checked when Listen loads it.
func (o Options) validate(public, admin http.Handler) error {
	var errs []error
	problem := func(format string, args ...any) { errs = append(errs, fmt.Errorf("edge: "+format, args...)) }
	if o.HTTPS != "" && o.TLS == nil {
		problem("an HTTPS listener needs TLS options")
	}
	if o.TLS != nil && o.HTTPS == "" {
		problem("TLS options need an HTTPS listener")
	}
	if (o.HTTP != "" || o.HTTPS != "") && public == nil {
		problem("the public listeners need a handler")
	}
	// A nil handler would make http.Server serve http.DefaultServeMux.
	if o.Admin != "" && admin == nil {
		problem("the admin listener needs a handler")
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"read header timeout", o.ReadHeaderTimeout}, {"idle timeout", o.IdleTimeout}} {
		if d.value < 0 {
			problem("negative %s %s", d.name, d.value)
		}
	}
	if o.MaxHeaderBytes < 0 {
		problem("negative max header bytes %d", o.MaxHeaderBytes)
	}
	if o.ClientIPv6Prefix < 0 || o.ClientIPv6Prefix > 128 {
		problem("client IPv6 prefix %d is not between 1 and 128", o.ClientIPv6Prefix)
	}
	if t := o.TLS; t != nil {
		if t.HSTSMaxAge < 0 {
			problem("negative HSTS max age %s", t.HSTSMaxAge)
		}
		if t.ACME == nil && len(t.Certificates) == 0 {
			problem("TLS needs ACME, certificates or both")
		}
		if a := t.ACME; a != nil {
			if len(a.Domains) == 0 {
				problem("ACME needs at least one domain")
			}
			for _, c := range a.Challenges {
				if c != ChallengeHTTP01 && c != ChallengeTLSALPN01 {
					problem("unknown ACME challenge %q", c)
				}
			}
			if !a.allows(ChallengeTLSALPN01) && a.allows(ChallengeHTTP01) && o.HTTP == "" {
				problem("ACME allows only %s, which needs an HTTP listener", ChallengeHTTP01)
			}
		}
	}
	return errors.Join(errs...)
}
