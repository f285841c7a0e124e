package subject

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// KeyHash is the SHA-256 of an API key. The gateway knows keys only by hash.
type KeyHash [sha256.Size]byte

// Options configures a Resolver.
type Options struct {
	// TrustedProxies are the peers whose forwarding and principal headers are
	// believed. Everyone else's are ignored.
	TrustedProxies []netip.Prefix
	// ForwardedHeader lists client addresses, X-Forwarded-For style: each hop
	// appends the address it saw. "Forwarded" is read as RFC 7239: the for=
	// parameter of each element. Default DefaultForwardedHeader.
	ForwardedHeader string
	// PrincipalHeader carries an identity asserted by a trusted proxy.
	PrincipalHeader string
	// APIKeyHeader carries an API key; only keys in KnownKeys count.
	// Default DefaultAPIKeyHeader.
	APIKeyHeader string
	KnownKeys    map[KeyHash]struct{}
	// KeyPlans are the plans of the known keys that have one.
	KeyPlans map[KeyHash]string
	// PlanHeader carries the plan of a principal, asserted by a trusted
	// proxy; from anyone else it is ignored.
	PlanHeader string
	// Plans are the plan names the configuration knows, besides those of
	// KeyPlans. A plan header naming another plan gives no plan (and is
	// labelled "other"), so that a proxy cannot mint budgets or labels.
	Plans []string
	// IPv6Prefix groups IPv6 clients into one subject per prefix, 1 to 128.
	// Default DefaultIPv6Prefix.
	IPv6Prefix int
	// PseudonymKeys are the HMAC secrets by version, each at least
	// MinSecretBytes long; PseudonymVersion is the one that signs.
	PseudonymKeys    map[int][]byte
	PseudonymVersion int
	// JWT configures the jwt source; nil: routes that list it never
	// identify by it.
	JWT *JWTOptions
	// ClientCAs are the roots a client certificate must chain to for the
	// client_cert source; nil: routes that list it never identify by it.
	ClientCAs *x509.CertPool
	// Now is the clock client certificates are checked against. Default
	// time.Now.
	Now func() time.Time
	// TLSFingerprint is the JA4 fingerprint of the TLS connection a
	// request's context belongs to, "" for none; nil: routes that list ja4
	// never identify by it.
	TLSFingerprint func(context.Context) string
}

// Defaults of Options.
const (
	DefaultForwardedHeader = "X-Forwarded-For"
	DefaultAPIKeyHeader    = "X-API-Key"
	// DefaultIPv6Prefix makes one subject of a /64, the least a site is
	// given: a host cannot hop through its addresses.
	DefaultIPv6Prefix = 64
)

// withDefaults fills the zero values.
func (o Options) withDefaults() Options {
	if o.ForwardedHeader == "" {
		o.ForwardedHeader = DefaultForwardedHeader
	}
	if o.APIKeyHeader == "" {
		o.APIKeyHeader = DefaultAPIKeyHeader
	}
	if o.IPv6Prefix == 0 {
		o.IPv6Prefix = DefaultIPv6Prefix
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Resolver resolves requests to subjects. It is immutable and safe for
// concurrent use.
type Resolver struct {
	trusted         []netip.Prefix
	forwardedHeader string
	principalHeader string
	apiKeyHeader    string
	knownKeys       map[KeyHash]struct{}
	ipv6Prefix      int
	pseudonymizer   *Pseudonymizer
	managed         []string
	jwt             *verifier // nil without a jwt block
	keyPlans        map[KeyHash]string
	planHeader      string
	plans           map[string]string // known plan names, to themselves
	certs           *chainVerdicts    // nil without ClientCAs
	fingerprint     func(context.Context) string
}

// Subject is who is asking, as far as anything outside this package may know.
type Subject struct {
	Kind      Kind
	Pseudonym string
	// Plan is the subject's plan, a name the configuration knows, or "":
	// from the API key's line, the JWT's plan claim, or a trusted proxy's
	// plan header for a principal.
	// It is part of the pseudonym.
	Plan string
	// PlanUnknown: a trusted proxy named a plan the configuration does not
	// know; Plan is "".
	PlanUnknown bool
}

var (
	// ErrAmbiguousCredential: a credential header appears more than once, so
	// the gateway and the upstream could disagree on who is asking.
	ErrAmbiguousCredential = errors.New("credential header sent more than once")
)

// errUnidentified: none of the route's sources identified the request. No
// caller branches on it: the handler answers every other error the same way.
var errUnidentified = errors.New("no subject source identified the request")

// ValidIPv6Prefix reports whether bits is a length an IPv6 client
// address can be cut to: 1 to 128.
func ValidIPv6Prefix(bits int) bool { return bits >= 1 && bits <= 128 }

// NewResolver returns a ready Resolver.
func NewResolver(opts Options) (*Resolver, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	pseudonymizer, err := NewPseudonymizer(opts.PseudonymKeys, opts.PseudonymVersion)
	if err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	opts = opts.withDefaults()
	var jwt *verifier
	if opts.JWT != nil {
		if jwt, err = newVerifier(*opts.JWT); err != nil {
			return nil, fmt.Errorf("subject: %w", err)
		}
	}
	plans := map[string]string{}
	for _, p := range opts.Plans {
		plans[p] = p
	}
	for _, p := range opts.KeyPlans {
		plans[p] = p
	}
	var certs *chainVerdicts
	if opts.ClientCAs != nil {
		certs = newChainVerdicts(opts.ClientCAs, opts.Now)
	}
	trusted := make([]netip.Prefix, len(opts.TrustedProxies))
	for i, p := range opts.TrustedProxies {
		trusted[i] = p.Masked()
	}
	return &Resolver{
		trusted:         trusted,
		forwardedHeader: http.CanonicalHeaderKey(opts.ForwardedHeader),
		principalHeader: http.CanonicalHeaderKey(opts.PrincipalHeader),
		apiKeyHeader:    http.CanonicalHeaderKey(opts.APIKeyHeader),
		knownKeys:       opts.KnownKeys,
		ipv6Prefix:      opts.IPv6Prefix,
		pseudonymizer:   pseudonymizer,
		managed:         opts.ManagedHeaders(),
		jwt:             jwt,
		keyPlans:        opts.KeyPlans,
		planHeader:      http.CanonicalHeaderKey(opts.PlanHeader),
		plans:           plans,
		certs:           certs,
		fingerprint:     opts.TLSFingerprint,
	}, nil
}

// Query is what a route asks Resolve.
type Query struct {
	// Sources are tried in order.
	Sources []Kind
	// OperationID is the route's; it is part of every pseudonym.
	OperationID string
	// MapsPlan reports whether the route gives a plan budgets of its own;
	// nil maps none. A subject's plan the route does not map is reported
	// (Subject.Plan) but is not part of its pseudonym there: it earns no
	// budget of its own on this route.
	MapsPlan func(plan string) bool
	// Gate, when not nil, is asked before a bearer token that was not
	// verified before has its signature checked.
	Gate TokenGate
	// CertIdentity is what of a client certificate the client_cert source
	// reads; CertHeader, in canonical form, is the request header that
	// carries it to the upstream (ForwardClientCert), "" for none.
	CertIdentity CertIdentity
	CertHeader   string
}

// TokenGate lets the caller refuse to spend a verification on a client:
// one that has sent too many invalid tokens, say. AdmitToken is given the
// client's own subject (its address as ClientSubject resolves it); an
// error it returns ends Resolve with that error, before any of the token
// is decoded.
type TokenGate interface {
	AdmitToken(ctx context.Context, client Subject) error
}

// Resolve tries q's sources in order and pseudonymizes the first that
// identifies the request, together with the operation ID. A bearer token
// that is present but fails verification ends the search: the error wraps
// ErrInvalidToken (a *TokenError), or is ErrKeysUnavailable when the key
// set was never fetched, or is what q.Gate returned. The token is believed
// from any peer: its signature is the trust.
func (r *Resolver) Resolve(req *http.Request, q Query) (Subject, error) {
	return r.Inbound(req).Resolve(q)
}

// Inbound is one request as the resolver sees it: its peer, and whether
// the peer is a trusted proxy, worked out once (Resolver.Inbound) for
// everything asked of the request: its subject, its client, and what the
// upstream may believe (Believe). The zero Inbound is no request.
type Inbound struct {
	r           *Resolver
	req         *http.Request
	peer        netip.Addr
	peerTrusted bool
}

// Inbound works out who sent req.
func (r *Resolver) Inbound(req *http.Request) Inbound {
	peer := peerAddr(req)
	return Inbound{r: r, req: req, peer: peer, peerTrusted: r.trusts(peer)}
}

// PeerTrusted reports whether the request's peer is a trusted proxy: one
// whose forwarding headers are believed, and whose other assertions about
// the request (a trace context) may be believed too.
func (in Inbound) PeerTrusted() bool { return in.peerTrusted }

// Resolve is Resolver.Resolve for the request.
func (in Inbound) Resolve(q Query) (Subject, error) {
	r, req, peer, peerTrusted := in.r, in.req, in.peer, in.peerTrusted
	sources := q.Sources
	for _, k := range sources {
		if h := r.header(k); h != "" && len(req.Header[h]) > 1 && (k != Principal || peerTrusted) {
			return Subject{}, ErrAmbiguousCredential
		}
	}
	for _, k := range sources {
		var identity string
		var s Subject
		switch k {
		case Principal:
			if !peerTrusted || r.principalHeader == "" {
				continue
			}
			identity = strings.TrimSpace(req.Header.Get(r.principalHeader))
			if identity != "" && r.planHeader != "" {
				if v := req.Header[r.planHeader]; len(v) > 1 {
					return Subject{}, ErrAmbiguousCredential
				} else if len(v) == 1 {
					s.Plan, s.PlanUnknown = r.knownPlan(strings.TrimSpace(v[0]))
				}
			}
		case APIKey:
			if r.apiKeyHeader == "" {
				continue
			}
			key := req.Header.Get(r.apiKeyHeader)
			if key == "" {
				continue
			}
			sum := KeyHash(sha256.Sum256([]byte(key)))
			if _, known := r.knownKeys[sum]; !known {
				continue // an unknown key never earns a bucket of its own
			}
			identity = string(sum[:])
			s.Plan = r.keyPlans[sum]
		case ClientIP:
			identity = r.clientIdentity(r.clientAddr(req, peer, peerTrusted))
		case JWT:
			if r.jwt == nil {
				continue
			}
			token, present := r.jwt.token(req)
			if !present {
				continue
			}
			var gate func() error
			if q.Gate != nil {
				gate = func() error {
					return q.Gate.AdmitToken(req.Context(), in.ClientSubject())
				}
			}
			claims, err := r.jwt.verify(req.Context(), token, gate)
			if err != nil {
				return Subject{}, err
			}
			identity = claims.principal
			s.Plan, s.PlanUnknown = r.knownPlan(claims.plan)
		case ClientCert:
			identity = in.clientCert(q.CertIdentity)
		case JA4, JA4ClientIP:
			identity = in.fingerprintIdentity(k)
		default:
			var err error
			if identity, err = fieldValue(req, k); err != nil {
				return Subject{}, err
			}
		}
		if identity == "" {
			continue
		}
		return r.sign(s, k, identity, q), nil
	}
	return Subject{}, errUnidentified
}

// sign gives s, identified as kind by its canonical identity, its
// pseudonym on the route q asks for: its plan is framed in only when the
// route maps it.
func (r *Resolver) sign(s Subject, kind Kind, identity string, q Query) Subject {
	s.Kind = kind
	framed := s.Plan
	if framed != "" && (q.MapsPlan == nil || !q.MapsPlan(framed)) {
		framed = ""
	}
	s.Pseudonym = r.pseudonymizer.PseudonymWithPlan(kind, identity, q.OperationID, framed)
	return s
}

// Named is the subject a request identified as kind by identity, on plan,
// resolves to on the route q asks for: the same canonical identity (an
// address as its client prefix, an API key by its hash) and pseudonym that
// Resolve gives it. identity is what the client presents: an address, an
// API key, a principal, a JWT's principal claim, or its client
// certificate's identity as the route reads it (q.CertIdentity: the SPKI
// SHA-256 in hex, a URI or a DNS name). An API key's plan is
// its own; plan, if given, must be it. The admin API names subjects so.
// The errors say what the request path would not identify.
func (r *Resolver) Named(kind Kind, identity, plan string, q Query) (Subject, error) {
	if !slices.Contains(q.Sources, kind) {
		return Subject{}, fmt.Errorf("the route does not identify subjects by %s", kind)
	}
	var s Subject
	switch kind {
	case ClientIP:
		a, err := netip.ParseAddr(identity)
		if err != nil {
			// Not err: it repeats the identity.
			return Subject{}, errors.New("client_ip: not an IP address")
		}
		identity = r.clientIdentity(a.Unmap())
	case APIKey:
		sum := KeyHash(sha256.Sum256([]byte(identity)))
		if _, known := r.knownKeys[sum]; !known || r.apiKeyHeader == "" {
			return Subject{}, errors.New("api_key: no such key is configured")
		}
		identity = string(sum[:])
		s.Plan = r.keyPlans[sum]
		if plan != "" && plan != s.Plan {
			return Subject{}, fmt.Errorf("api_key: the key's plan is %q, not %q", s.Plan, plan)
		}
		plan = ""
	case Principal:
		if r.principalHeader == "" {
			return Subject{}, errors.New("principal: no principal header is configured")
		}
		identity = strings.TrimSpace(identity)
	case JWT:
		if r.jwt == nil {
			return Subject{}, errors.New("jwt: no jwt block is configured")
		}
	case ClientCert:
		if r.certs == nil {
			return Subject{}, errors.New("client_cert: no client_ca_file is configured")
		}
		if identity != "" {
			identity = q.CertIdentity.named(identity)
		}
	case JA4, JA4ClientIP:
		var err error
		if identity, err = r.namedFingerprint(kind, identity); err != nil {
			return Subject{}, err
		}
	default:
		if len(identity) > MaxFieldBytes {
			return Subject{}, fmt.Errorf("%s: longer than %d bytes", kind, MaxFieldBytes)
		}
	}
	if identity == "" {
		return Subject{}, fmt.Errorf("%s: no identity", kind)
	}
	if plan != "" {
		if s.Plan, s.PlanUnknown = r.knownPlan(plan); s.PlanUnknown {
			return Subject{}, fmt.Errorf("no plan %q is configured", plan)
		}
	}
	return r.sign(s, kind, identity, q), nil
}

// ClientSubject is the subject of req's client address, resolved as the
// client_ip source resolves it (trusted proxies respected), and the same
// for every route: the subject that answers for the invalid tokens a
// client sends. Its Pseudonym is empty when the address is unknown.
func (r *Resolver) ClientSubject(req *http.Request) Subject {
	return r.Inbound(req).ClientSubject()
}

// ClientSubject is Resolver.ClientSubject for the request.
func (in Inbound) ClientSubject() Subject {
	identity := in.r.clientIdentity(in.r.clientAddr(in.req, in.peer, in.peerTrusted))
	if identity == "" {
		return Subject{Kind: ClientIP}
	}
	// The operation ID is empty: framed, it is no route's.
	return Subject{Kind: ClientIP, Pseudonym: in.r.pseudonymizer.Pseudonym(ClientIP, identity, "")}
}

// knownPlan maps a plan a proxy asserted to the configuration's name for
// it: ("", true) when the configuration knows no such plan.
func (r *Resolver) knownPlan(v string) (plan string, unknown bool) {
	if v == "" {
		return "", false
	}
	if p, ok := r.plans[v]; ok {
		return p, false
	}
	return "", true
}

func (r *Resolver) header(k Kind) string {
	switch k {
	case Principal:
		return r.principalHeader
	case APIKey:
		return r.apiKeyHeader
	case JWT:
		if r.jwt != nil {
			return r.jwt.header
		}
	}
	if k.source == sourceHeader {
		return k.field
	}
	return ""
}

// trusts reports whether addr is a trusted proxy.
func (r *Resolver) trusts(addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	for _, p := range r.trusted {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// Client is the client of req as the client_ip source sees it: the peer,
// or behind a trusted proxy the forwarded address; an IPv4 address as a
// /32, an IPv6 one as its configured prefix, so that one host cannot hop
// through its /64. It is the zero Prefix when there is no address. The
// raw address it holds must stay in memory: it is no pseudonym.
func (r *Resolver) Client(req *http.Request) netip.Prefix {
	return r.Inbound(req).Client()
}

// Client is Resolver.Client for the request.
func (in Inbound) Client() netip.Prefix {
	return in.r.clientPrefix(in.r.clientAddr(in.req, in.peer, in.peerTrusted))
}

func (r *Resolver) clientPrefix(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	bits := 32
	if a.Is6() {
		a, bits = a.WithZone(""), r.ipv6Prefix
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return netip.Prefix{}
	}
	return p
}

// clientIdentity is the canonical form of an address: IPv4 as is, IPv6 as
// its client prefix.
func (r *Resolver) clientIdentity(a netip.Addr) string {
	p := r.clientPrefix(a)
	switch {
	case !p.IsValid():
		return ""
	case p.Addr().Is4():
		return p.Addr().String()
	}
	return p.String()
}

// peerAddr is the TCP peer of req.
func peerAddr(req *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(req.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}
