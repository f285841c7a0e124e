package subject_test

import (
	"crypto/sha256"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/edgegate/gateway/subject"
)

const fakeSecret = "test-only-fake-hmac-secret-0123456789abcdef"

func newResolver(t *testing.T) *subject.Resolver {
	t.Helper()
	r, err := subject.NewResolver(subject.Options{
		TrustedProxies:   []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		PrincipalHeader:  "X-Auth-Principal",
		APIKeyHeader:     "X-API-Key",
		KnownKeys:        map[subject.KeyHash]struct{}{sha256.Sum256([]byte("known-key-1")): {}, sha256.Sum256([]byte("known-key-2")): {}},
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func request(peer string, headers ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

var all = []subject.Kind{subject.Principal, subject.APIKey, subject.ClientIP}

func TestResolve(t *testing.T) {
	r := newResolver(t)
	resolve := func(req *http.Request) subject.Subject {
		t.Helper()
		s, err := r.Resolve(req, subject.Query{Sources: all, OperationID: "op"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	direct := resolve(request("203.0.113.7:5000"))
	cases := []struct {
		name string
		req  *http.Request
		kind subject.Kind
		same *subject.Subject // the subject this one must equal
	}{
		{"an untrusted peer's forwarded header is ignored", request("203.0.113.7:5000", "X-Forwarded-For", "198.51.100.1"), subject.ClientIP, &direct},
		{"an untrusted peer's principal is ignored", request("203.0.113.7:5000", "X-Auth-Principal", "admin"), subject.ClientIP, &direct},
		{"a trusted proxy's forwarded client is the subject", request("10.1.1.1:5000", "X-Forwarded-For", "203.0.113.7"), subject.ClientIP, &direct},
		{"a forged left-most hop behind a trusted proxy is ignored", request("10.1.1.1:5000", "X-Forwarded-For", "198.51.100.99, 203.0.113.7"), subject.ClientIP, &direct},
		{"several field lines are one list", request("10.1.1.1:5000", "X-Forwarded-For", "198.51.100.99", "X-Forwarded-For", "203.0.113.7, 10.2.2.2"), subject.ClientIP, &direct},
		{"an unknown api key falls through to the address", request("203.0.113.7:5000", "X-API-Key", "guess"), subject.ClientIP, &direct},
		{"a known api key is its own subject", request("203.0.113.7:5000", "X-API-Key", "known-key-1"), subject.APIKey, nil},
		{"a trusted principal wins", request("10.1.1.1:5000", "X-Auth-Principal", "alice", "X-API-Key", "known-key-1"), subject.Principal, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := resolve(c.req)
			if s.Kind != c.kind {
				t.Fatalf("kind %v, want %v", s.Kind, c.kind)
			}
			if c.same != nil && s != *c.same {
				t.Fatalf("subject %v, want %v", s, *c.same)
			}
			if !strings.HasPrefix(s.Pseudonym, "v1:") || len(s.Pseudonym) != 3+64 {
				t.Fatalf("pseudonym %q is not v1:<64 hex>", s.Pseudonym)
			}
		})
	}
	t.Run("two known keys get one subject each", func(t *testing.T) {
		a := resolve(request("203.0.113.7:5000", "X-API-Key", "known-key-1"))
		b := resolve(request("203.0.113.7:5000", "X-API-Key", "known-key-2"))
		if a == b {
			t.Fatal("two keys share a subject")
		}
	})
	t.Run("ipv6 clients are grouped by prefix", func(t *testing.T) {
		a := resolve(request("[2001:db8:1:2::1]:5000"))
		b := resolve(request("[2001:db8:1:2:ffff::9]:5000"))
		c := resolve(request("[2001:db8:1:3::1]:5000"))
		if a != b || a == c {
			t.Fatalf("same /64: %v %v; other /64: %v", a, b, c)
		}
	})
	t.Run("operations do not share pseudonyms", func(t *testing.T) {
		other, _ := r.Resolve(request("203.0.113.7:5000"), subject.Query{Sources: all, OperationID: "other-op"})
		if other == direct {
			t.Fatal("two operations share a pseudonym")
		}
	})
	t.Run("duplicate credential headers are ambiguous", func(t *testing.T) {
		for _, req := range []*http.Request{
			request("203.0.113.7:5000", "X-API-Key", "known-key-1", "X-API-Key", "known-key-2"),
			request("10.1.1.1:5000", "X-Auth-Principal", "alice", "X-Auth-Principal", "bob"),
		} {
			if _, err := r.Resolve(req, subject.Query{Sources: all, OperationID: "op"}); !errors.Is(err, subject.ErrAmbiguousCredential) {
				t.Fatalf("err %v, want ErrAmbiguousCredential", err)
			}
		}
	})
	t.Run("no source means unidentified", func(t *testing.T) {
		_, err := r.Resolve(request("203.0.113.7:5000", "X-API-Key", "guess"), subject.Query{Sources: []subject.Kind{subject.APIKey}, OperationID: "op"})
		if !errors.Is(err, subject.ErrUnidentified) {
			t.Fatalf("err %v, want ErrUnidentified", err)
		}
	})
	t.Run("no raw identity in the pseudonym", func(t *testing.T) {
		for _, s := range []string{direct.Pseudonym, resolve(request("10.1.1.1:5000", "X-Auth-Principal", "alice")).Pseudonym} {
			if strings.Contains(s, "203.0.113.7") || strings.Contains(s, "alice") {
				t.Fatalf("pseudonym %q holds a raw identity", s)
			}
		}
	})
}

func TestPseudonymFraming(t *testing.T) {
	p, err := subject.NewPseudonymizer(map[int][]byte{2: []byte(fakeSecret)}, 2)
	if err != nil {
		t.Fatal(err)
	}
	// Without length framing these two would hash the same bytes.
	a := p.Pseudonym(subject.Principal, "ab", "c")
	b := p.Pseudonym(subject.Principal, "a", "bc")
	if a == b {
		t.Fatal("framing does not separate fields")
	}
	if !strings.HasPrefix(a, "v2:") {
		t.Fatalf("pseudonym %q does not carry version 2", a)
	}
	// A plan is a field of its own: no plan is the three-field pseudonym,
	// and no plan makes an operation ID or identity of another subject.
	if p.PseudonymWithPlan(subject.APIKey, "k", "op", "") != p.Pseudonym(subject.APIKey, "k", "op") {
		t.Fatal("a subject without a plan changed its pseudonym")
	}
	gold := p.PseudonymWithPlan(subject.APIKey, "k", "op", "gold")
	for _, other := range []string{
		p.Pseudonym(subject.APIKey, "k", "op"),
		p.PseudonymWithPlan(subject.APIKey, "k", "op", "silver"),
		p.PseudonymWithPlan(subject.APIKey, "k", "opgold", ""),
	} {
		if gold == other {
			t.Fatal("a plan does not separate budgets")
		}
	}
	if _, err := subject.NewPseudonymizer(map[int][]byte{1: []byte("short")}, 1); err == nil {
		t.Fatal("a short secret was accepted")
	}
	if _, err := subject.NewPseudonymizer(map[int][]byte{1: []byte(fakeSecret)}, 2); err == nil {
		t.Fatal("an active version without a key was accepted")
	}
}

func BenchmarkResolveClientIP(b *testing.B) {
	r, _ := subject.NewResolver(subject.Options{PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	req := request("10.1.1.1:5000", "X-Forwarded-For", "198.51.100.99, 203.0.113.7")
	b.ReportAllocs()
	for b.Loop() {
		r.Resolve(req, subject.Query{Sources: all, OperationID: "orders.read"})
	}
}

func TestAnAPIKeyIsReadFromXAPIKeyUnlessConfiguredOtherwise(t *testing.T) {
	r, err := subject.NewResolver(subject.Options{
		KnownKeys:        map[subject.KeyHash]struct{}{sha256.Sum256([]byte("known-key-1")): {}},
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Resolve(request("192.0.2.1:5000", "X-API-Key", "known-key-1"), subject.Query{Sources: []subject.Kind{subject.APIKey}, OperationID: "op"})
	if err != nil || s.Kind != subject.APIKey {
		t.Fatalf("subject %+v, %v", s, err)
	}
}

// forwarded_header = "Forwarded" reads RFC 7239 for= elements, quoted IPv6
// with ports included, so clients behind a proxy that speaks it get buckets
// of their own.
func TestForwardedIsReadAsRFC7239(t *testing.T) {
	r, err := subject.NewResolver(subject.Options{
		TrustedProxies:   []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		ForwardedHeader:  "Forwarded",
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	pseudonym := func(peer string, headers ...string) string {
		t.Helper()
		s, err := r.Resolve(request(peer, headers...), subject.Query{Sources: []subject.Kind{subject.ClientIP}, OperationID: "op"})
		if err != nil {
			t.Fatal(err)
		}
		return s.Pseudonym
	}
	direct := func(addr string) string { return pseudonym(addr + ":1000") }
	for _, c := range []struct {
		name, header, want string
	}{
		{"an IPv4 for=", `for=192.0.2.60;proto=http;by=203.0.113.43`, direct("192.0.2.60")},
		{"a quoted IPv4 with a port", `for="192.0.2.60:4711"`, direct("192.0.2.60")},
		{"a quoted IPv6 with a port", `For="[2001:db8:cafe::17]:4711"`, direct("[2001:db8:cafe::17]")},
		{"the right-most untrusted element", `for=198.51.100.1, for=192.0.2.60, for=10.1.2.3`, direct("192.0.2.60")},
		{"an obfuscated node stops the walk at the last readable hop", `for=198.51.100.1, for=_hidden, for=10.1.2.3`, direct("10.1.2.3")},
	} {
		if got := pseudonym("10.0.0.1:5000", "Forwarded", c.header); got != c.want {
			t.Errorf("%s: a different subject", c.name)
		}
	}
	// From an untrusted peer the header is ignored.
	if pseudonym("192.0.2.99:5000", "Forwarded", "for=198.51.100.1") != direct("192.0.2.99") {
		t.Error("an untrusted peer's Forwarded was believed")
	}
}

func TestAPlanIsPartOfThePseudonymOnlyWhereTheRouteMapsIt(t *testing.T) {
	gold := subject.KeyHash(sha256.Sum256([]byte("gold-key")))
	r, err := subject.NewResolver(subject.Options{
		KnownKeys:        map[subject.KeyHash]struct{}{gold: {}},
		KeyPlans:         map[subject.KeyHash]string{gold: "gold"},
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := subject.NewPseudonymizer(map[int][]byte{1: []byte(fakeSecret)}, 1)
	req := request("192.0.2.1:5000", "X-API-Key", "gold-key")
	keys := []subject.Kind{subject.APIKey}
	for name, c := range map[string]struct {
		maps   func(string) bool
		framed string
	}{
		"a route that maps gold":        {func(p string) bool { return p == "gold" }, "gold"},
		"a route that maps other plans": {func(p string) bool { return p == "silver" }, ""},
		"a route without plans":         {nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := r.Resolve(req, subject.Query{Sources: keys, OperationID: "op", MapsPlan: c.maps})
			if err != nil {
				t.Fatal(err)
			}
			if want := p.PseudonymWithPlan(subject.APIKey, string(gold[:]), "op", c.framed); s.Pseudonym != want || s.Plan != "gold" {
				t.Fatalf("pseudonym %s plan %q, want %s with plan gold", s.Pseudonym, s.Plan, want)
			}
		})
	}
}

func TestClientIsTheAddressTheClientIPSourceSees(t *testing.T) {
	r := newResolver(t)
	for name, c := range map[string]struct {
		req  *http.Request
		want string
	}{
		"an IPv4 peer":                          {request("192.0.2.7:1234"), "192.0.2.7/32"},
		"an IPv6 peer, as its /64":              {request("[2001:db8:1:2:3:4:5:6]:1234"), "2001:db8:1:2::/64"},
		"behind a trusted proxy, the forwarded": {request("10.0.0.1:1234", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9/32"},
		"an untrusted peer's header is ignored": {request("192.0.2.7:1234", "X-Forwarded-For", "198.51.100.9"), "192.0.2.7/32"},
	} {
		if got := r.Client(c.req).String(); got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
	if p := r.Client(request("not an address")); p.IsValid() {
		t.Errorf("a request without an address: %s, want none", p)
	}
}

// A cookie or query parameter the client sent in a form the gateway does
// not read, but an upstream may (Go drops a cookie value holding '"' or
// '\'; PHP reads "api.key" as "api_key"; Rack 2 splits pairs on ';'), is
// refused: were it to fall through, the next source's budget would hold
// a client the upstream knows by the field, out of the field's penalty.
// Only a field that is absent or empty falls through; a name that merely
// holds the field's falls through too.
func TestAFieldSentInAFormTheGatewayDoesNotReadIsRefused(t *testing.T) {
	r := newResolver(t)
	session, _ := subject.ParseKind("cookie:session")
	sessionID, _ := subject.ParseKind("cookie:session_id")
	apiKey, _ := subject.ParseKind("query:api_key")
	withCookie := func(cookie string) *http.Request {
		return withHeader(httptest.NewRequest("GET", "/", nil), "Cookie", cookie)
	}
	get := func(target string) *http.Request { return httptest.NewRequest("GET", target, nil) }
	for _, c := range []struct {
		name string
		kind subject.Kind
		req  *http.Request
		want subject.Kind // the zero Kind: ErrBadSubject
	}{
		{"a cookie value with a stray quote is refused", session, withCookie(`session="s3ss10n`), subject.Kind{}},
		{"a cookie value with a backslash is refused", session, withCookie(`session=s3ss10n\`), subject.Kind{}},
		{"a cookie value beyond ASCII is refused", session, withCookie("session=caf\u00e9"), subject.Kind{}},
		{"a malformed cookie beside a good one is refused", session, withCookie(`session=a; session="b`), subject.Kind{}},
		{"a cookie named as PHP folds it is refused", sessionID, withCookie("session.id=s3ss10n"), subject.Kind{}},
		{"a parameter named with a '.' is refused", apiKey, get("/?api.key=K"), subject.Kind{}},
		{"a parameter named with a '+' is refused", apiKey, get("/?api+key=K"), subject.Kind{}},
		{"a parameter named with an encoded '.' is refused", apiKey, get("/?api%2Ekey=K"), subject.Kind{}},
		{"a parameter named with a leading space is refused", apiKey, get("/?%20api_key=K"), subject.Kind{}},
		{"a parameter named with an unclosed '[' is refused", apiKey, get("/?api[key=K"), subject.Kind{}},
		{"a parameter beside its folded name is refused", apiKey, get("/?api_key=A&api.key=B"), subject.Kind{}},
		{"a parameter after a ';' is refused", apiKey, get("/?x=1;api_key=K"), subject.Kind{}},
		{"a parameter before a ';' is refused", apiKey, get("/?api_key=K;x=1"), subject.Kind{}},
		{"a quoted cookie is read", session, withCookie(`session="s3ss10n"`), session},
		{"a cookie with a space before '=' is read", session, withCookie("session =s3ss10n"), session},
		{"the parameter is read", apiKey, get("/?api_key=K&api_key_id=1"), apiKey},
		{"an empty cookie falls through", session, withCookie("session="), subject.ClientIP},
		{"an empty parameter falls through", apiKey, get("/?api_key="), subject.ClientIP},
		{"another malformed cookie falls through", session, withCookie(`my_session="x; session_id=\`), subject.ClientIP},
		{"a parameter whose name holds the field's falls through", apiKey, get("/?x_api_key=K&api_keys=K&api_key[]=K&api[key]=K"), subject.ClientIP},
		{"a parameter named in another case falls through", apiKey, get("/?API_KEY=K"), subject.ClientIP},
		{"a ';' in another parameter's value falls through", apiKey, get("/?note=api_key;x"), subject.ClientIP},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := r.Resolve(c.req, subject.Query{Sources: []subject.Kind{c.kind, subject.ClientIP}, OperationID: "op"})
			if c.want == (subject.Kind{}) {
				if !errors.Is(err, subject.ErrBadSubject) {
					t.Fatalf("%+v, %v; want ErrBadSubject", s, err)
				}
				return
			}
			if err != nil || s.Kind != c.want {
				t.Fatalf("%+v, %v; want %s", s, err, c.want)
			}
		})
	}
}
