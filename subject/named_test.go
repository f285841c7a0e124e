package subject_test

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/edgegate/gateway/subject"
)

// The admin API names a subject by kind and identity; Named must give it
// the pseudonym a request that carries that identity gets, plan included
// only where the route maps it.
func TestANamedSubjectIsTheSubjectOfARequestThatCarriesIt(t *testing.T) {
	gold := subject.KeyHash(sha256.Sum256([]byte("gold-key")))
	r, err := subject.NewResolver(subject.Options{
		TrustedProxies:   []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		PrincipalHeader:  "X-Auth-Principal",
		PlanHeader:       "X-Auth-Plan",
		Plans:            []string{"gold", "silver"},
		KnownKeys:        map[subject.KeyHash]struct{}{gold: {}},
		KeyPlans:         map[subject.KeyHash]string{gold: "gold"},
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	mapsGold := func(p string) bool { return p == "gold" }
	for _, c := range []struct {
		name           string
		kind           subject.Kind
		identity, plan string
		req            []string // peer, then headers
	}{
		{"an IPv4 client", subject.ClientIP, "203.0.113.7", "", []string{"203.0.113.7:5000"}},
		{"an IPv6 client, by any address of its /64", subject.ClientIP, "2001:db8::1", "", []string{"[2001:db8::ffff]:5000"}},
		{"an IPv4-mapped client", subject.ClientIP, "::ffff:203.0.113.7", "", []string{"203.0.113.7:5000"}},
		{"an API key, on its plan", subject.APIKey, "gold-key", "", []string{"192.0.2.1:5000", "X-API-Key", "gold-key"}},
		{"a principal on a plan the route maps", subject.Principal, "alice", "gold", []string{"10.0.0.1:5000", "X-Auth-Principal", "alice", "X-Auth-Plan", "gold"}},
		{"a principal on a plan the route does not map", subject.Principal, "alice", "silver", []string{"10.0.0.1:5000", "X-Auth-Principal", "alice", "X-Auth-Plan", "silver"}},
		{"a principal without a plan", subject.Principal, "alice", "", []string{"10.0.0.1:5000", "X-Auth-Principal", "alice"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, maps := range []func(string) bool{nil, mapsGold} {
				q := subject.Query{Sources: []subject.Kind{c.kind}, OperationID: "op", MapsPlan: maps}
				want, err := r.Resolve(request(c.req[0], c.req[1:]...), q)
				if err != nil {
					t.Fatal(err)
				}
				got, err := r.Named(c.kind, c.identity, c.plan, q)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("named %+v, resolved %+v", got, want)
				}
			}
		})
	}
	for _, c := range []struct {
		name           string
		kind           subject.Kind
		identity, plan string
	}{
		{"an unknown API key", subject.APIKey, "no-such-key", ""},
		{"an API key on another plan than its own", subject.APIKey, "gold-key", "silver"},
		{"an unknown plan", subject.Principal, "alice", "platinum"},
		{"not an address", subject.ClientIP, "nowhere", ""},
		{"no identity", subject.Principal, " ", ""},
		{"a kind the route does not take", subject.JWT, "alice", ""},
	} {
		t.Run(c.name+" is refused", func(t *testing.T) {
			q := subject.Query{Sources: []subject.Kind{subject.ClientIP, subject.APIKey, subject.Principal}, OperationID: "op"}
			if _, err := r.Named(c.kind, c.identity, c.plan, q); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// A header, cookie or query source is named KIND:NAME:VALUE by the admin
// API, and Named gives it the pseudonym a request with that value gets.
func TestANamedFieldSubjectIsTheSubjectOfARequestThatCarriesIt(t *testing.T) {
	r, err := subject.NewResolver(subject.Options{PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		named string
		req   *http.Request
	}{
		{"header:x-tenant:acme", withHeader(request("192.0.2.1:1"), "X-Tenant", "acme")},
		{"cookie:session:a:b", withHeader(request("192.0.2.1:1"), "Cookie", "session=a:b")},
		{"query:key:a b", httptest.NewRequest("GET", "/?key=a+b", nil)},
	} {
		t.Run(c.named, func(t *testing.T) {
			kind, identity, err := subject.ParseNamed(c.named)
			if err != nil {
				t.Fatal(err)
			}
			q := subject.Query{Sources: []subject.Kind{kind}, OperationID: "op"}
			want, err := r.Resolve(c.req, q)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Named(kind, identity, "", q)
			if err != nil || got != want {
				t.Fatalf("named %+v, %v; resolved %+v", got, err, want)
			}
			if _, err := r.Named(kind, strings.Repeat("a", subject.MaxFieldBytes+1), "", q); err == nil {
				t.Fatal("a value over the limit is named")
			}
		})
	}
	for _, bad := range []string{"header:acme", "header", "form:x:y", "header:bad name:x"} {
		if _, _, err := subject.ParseNamed(bad); err == nil {
			t.Errorf("ParseNamed(%q) gave no error", bad)
		}
	}
}

func withHeader(req *http.Request, name, value string) *http.Request {
	req.Header.Set(name, value)
	return req
}
