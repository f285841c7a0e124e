package proxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/subject/jwttest"
)

func jwtGatewayResolver(t *testing.T, keys subject.KeySet) *subject.Resolver {
	t.Helper()
	r, err := subject.NewResolver(subject.Options{
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
		JWT: &subject.JWTOptions{
			Keys:       keys,
			Issuer:     "https://idp.test/",
			Audience:   []string{"orders-api"},
			Leeway:     30 * time.Second,
			Algorithms: []string{"RS256", "ES256", "EdDSA"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func jwtRoute(t *testing.T, up *upstream, p *limiter.Policy) proxy.Route {
	r := route("orders.read", "/", up, t, p)
	r.Subject = []subject.Kind{subject.JWT, subject.ClientIP}
	return r
}

// from sends a request for /orders from the loopback address local, so
// that one gateway sees several clients.
func from(t *testing.T, g *gateway, local string, headers ...string) *http.Response {
	t.Helper()
	return fromPath(t, g, local, "/orders", headers...)
}

func TestJWTBucketsFollowTheSubjectAcrossAddresses(t *testing.T) {
	up := newUpstream(t)
	k := jwttest.RSA(t, "r1")
	keys, err := subject.ParseKeySet(jwttest.JWKS(k))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, setup{
		routes:   []proxy.Route{jwtRoute(t, up, policy(limitertest.FixedWindow(2, time.Minute), "two"))},
		resolver: jwtGatewayResolver(t, keys),
	})
	exp := time.Now().Add(time.Hour)
	alice := "Bearer " + k.Sign(t, jwttest.Claims("alice", exp))
	bob := "Bearer " + k.Sign(t, jwttest.Claims("bob", exp))

	var got []int
	for _, local := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
		got = append(got, from(t, g, local, "Authorization", alice).StatusCode)
	}
	wantStatuses(t, got, 200, 200, 429)
	if h := up.last().Header.Get("Authorization"); h != alice {
		t.Fatalf("upstream saw Authorization %q, want the token unchanged", h)
	}
	wantStatuses(t, []int{from(t, g, "127.0.0.2", "Authorization", bob).StatusCode}, 200)
	// Without a token the address is the subject, with its own budget.
	wantStatuses(t, []int{from(t, g, "127.0.0.2").StatusCode, from(t, g, "127.0.0.2").StatusCode, from(t, g, "127.0.0.2").StatusCode}, 200, 200, 429)
	if strings.Contains(g.logs.String(), "alice") || strings.Contains(g.logs.String(), alice[7:20]) {
		t.Fatal("the access log holds a principal or a token")
	}
	if !strings.Contains(g.logs.String(), `"subject_kind":"jwt"`) {
		t.Fatal("the access log does not say the subject came from a token")
	}
}

func TestEveryInvalidTokenGets401AndNothingUpstream(t *testing.T) {
	up := newUpstream(t)
	good, stranger := jwttest.EC(t, "e1"), jwttest.EC(t, "e2")
	keys, err := subject.ParseKeySet(jwttest.JWKS(good, jwttest.RSA(t, "r1")))
	if err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, setup{
		routes:   []proxy.Route{jwtRoute(t, up, policy(limitertest.FixedWindow(1, time.Minute), "one"))},
		resolver: jwtGatewayResolver(t, keys),
		// Every case from one address, within its budget of invalid
		// tokens: this test is about the 401s.
		invalidTokens: policy(limitertest.FixedWindow(1000, time.Minute), "invalid-tokens"),
	})
	invalid := jwttest.Invalid(t, good, stranger, time.Now())
	for name, tok := range invalid {
		t.Run(name, func(t *testing.T) {
			res := g.get(t, "/orders", "Authorization", "Bearer "+tok)
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d, want 401", res.StatusCode)
			}
			if h := res.Header.Get("WWW-Authenticate"); h != `Bearer error="invalid_token"` {
				t.Fatalf("WWW-Authenticate %q", h)
			}
			var p struct{ Type string }
			json.NewDecoder(res.Body).Decode(&p)
			if p.Type != "urn:edge-gateway:problem:invalid-token" || res.Header.Get("Content-Type") != "application/problem+json" {
				t.Fatalf("problem %q, %s", p.Type, res.Header.Get("Content-Type"))
			}
			if res.Header.Get("RateLimit") != "" {
				t.Fatal("a refused token got RateLimit headers")
			}
		})
	}
	if n := up.count(); n != 0 {
		t.Fatalf("%d invalid tokens reached the upstream", n)
	}
	// Nothing was charged: the token's principal and the address each
	// still have their one request.
	wantStatuses(t, statuses(t, g, "/orders", 2, "Authorization", "Bearer "+good.Sign(t, jwttest.Claims("alice", time.Now().Add(time.Hour)))), 200, 429)
	wantStatuses(t, statuses(t, g, "/orders", 2), 200, 429)
	logs := g.logs.String()
	if !strings.Contains(logs, `"outcome":"invalid_token"`) || !strings.Contains(logs, `"reason":"expired"`) {
		t.Fatal("the access log does not say why tokens were refused")
	}
	for name, tok := range invalid {
		if len(tok) > 20 && strings.Contains(logs, tok[len(tok)-20:]) {
			t.Fatalf("the access log holds the token %q", name)
		}
	}
}

// jwksServer serves a key set that goes down and rotates, counting fetches.
type jwksServer struct {
	*httptest.Server
	mu      sync.Mutex
	jwks    []byte
	down    bool
	fetches atomic.Int64
}

func newJWKSServer(t *testing.T, keys ...*jwttest.Key) *jwksServer {
	s := &jwksServer{jwks: jwttest.JWKS(keys...)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.down {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write(s.jwks)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(down bool, keys ...*jwttest.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if len(keys) > 0 {
		s.jwks = jwttest.JWKS(keys...)
	}
}

func TestAJWKSURLThatGoesDownAndRotates(t *testing.T) {
	up := newUpstream(t)
	old, next := jwttest.RSA(t, "old"), jwttest.EC(t, "next")
	idp := newJWKSServer(t, old)
	idp.set(true)
	clock := limitertest.NewClock() // the key set's; tokens follow real time
	keys, err := subject.NewRemoteKeys(subject.RemoteKeysOptions{URL: idp.URL, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Refresh(context.Background()); err == nil {
		t.Fatal("a provider that is down served keys")
	}
	g := newGateway(t, setup{
		routes:   []proxy.Route{jwtRoute(t, up, policy(limitertest.FixedWindow(100, time.Minute), "hundred"))},
		resolver: jwtGatewayResolver(t, keys),
	})
	exp := time.Now().Add(time.Hour)
	oldToken := "Bearer " + old.Sign(t, jwttest.Claims("alice", exp))
	nextToken := "Bearer " + next.Sign(t, jwttest.Claims("alice", exp))

	t.Run("never fetched: tokens cannot be decided, the rest goes on", func(t *testing.T) {
		res := g.get(t, "/orders", "Authorization", oldToken)
		if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
			t.Fatalf("status %d Retry-After %q, want 503 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"))
		}
		wantStatuses(t, statuses(t, g, "/orders", 1), 200)
	})

	idp.set(false)
	if err := keys.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Run("the provider goes down: the keys it served stay", func(t *testing.T) {
		idp.set(true)
		wantStatuses(t, statuses(t, g, "/orders", 3, "Authorization", oldToken), 200, 200, 200)
	})
	t.Run("a rotated key: one fetch, then it verifies", func(t *testing.T) {
		idp.set(false, old, next)
		clock.Advance(10 * time.Second) // the least time between two fetches
		before := idp.fetches.Load()
		wantStatuses(t, statuses(t, g, "/orders", 3, "Authorization", nextToken), 200, 200, 200)
		if n := idp.fetches.Load() - before; n != 1 {
			t.Fatalf("%d fetches, want 1", n)
		}
		wantStatuses(t, statuses(t, g, "/orders", 1, "Authorization", oldToken), 200)
	})
	if n := up.count(); n != 8 {
		t.Fatalf("upstream saw %d requests, want 8", n)
	}
}
