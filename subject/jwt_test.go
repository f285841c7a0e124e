package subject_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/subject/jwttest"
)

// clock is a settable time for tests that must not sleep.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func jwtOptions(keys subject.KeySet, now func() time.Time) *subject.JWTOptions {
	return &subject.JWTOptions{
		Keys:       keys,
		Issuer:     "https://idp.test/",
		Audience:   []string{"orders-api"},
		Leeway:     30 * time.Second,
		Algorithms: []string{"RS256", "ES256", "EdDSA"},
		Now:        now,
	}
}

func jwtResolver(t testing.TB, o *subject.JWTOptions) *subject.Resolver {
	t.Helper()
	r, err := subject.NewResolver(subject.Options{
		APIKeyHeader:     "X-API-Key",
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
		JWT:              o,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func staticKeys(t testing.TB, keys ...*jwttest.Key) *subject.StaticKeys {
	t.Helper()
	s, err := subject.ParseKeySet(jwttest.JWKS(keys...))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var jwtFirst = []subject.Kind{subject.JWT, subject.ClientIP}

func bearer(token string) *http.Request {
	return request("203.0.113.7:5000", "Authorization", "Bearer "+token)
}

func TestAVerifiedTokenIsItsPrincipalFromAnyPeer(t *testing.T) {
	c := newClock()
	rsaKey, ecKey, edKey := jwttest.RSA(t, "r1"), jwttest.EC(t, "e1"), jwttest.Ed25519(t, "d1")
	r := jwtResolver(t, jwtOptions(staticKeys(t, rsaKey, ecKey, edKey), c.Now))
	exp := c.Now().Add(time.Hour)

	var pseudonyms []string
	for _, k := range []*jwttest.Key{rsaKey, ecKey, edKey} {
		for _, peer := range []string{"203.0.113.7:5000", "198.51.100.9:4000", "[2001:db8::1]:80"} {
			req := request(peer, "Authorization", "Bearer "+k.Sign(t, jwttest.Claims("alice", exp)))
			s, err := r.Resolve(req, subject.Query{Sources: jwtFirst, OperationID: "op"})
			if err != nil {
				t.Fatalf("%s from %s: %v", k.Alg, peer, err)
			}
			if s.Kind != subject.JWT {
				t.Fatalf("kind %v, want jwt", s.Kind)
			}
			pseudonyms = append(pseudonyms, s.Pseudonym)
		}
	}
	for _, p := range pseudonyms {
		if p != pseudonyms[0] {
			t.Fatalf("one principal got two pseudonyms: %v", pseudonyms)
		}
	}
	bob, err := r.Resolve(bearer(rsaKey.Sign(t, jwttest.Claims("bob", exp))), subject.Query{Sources: jwtFirst, OperationID: "op"})
	if err != nil || bob.Pseudonym == pseudonyms[0] {
		t.Fatalf("bob: %v %v", bob, err)
	}
	// The same name asserted by a trusted proxy is another subject.
	p, _ := subject.NewPseudonymizer(map[int][]byte{1: []byte(fakeSecret)}, 1)
	if p.Pseudonym(subject.Principal, "alice", "op") == pseudonyms[0] {
		t.Fatal("a jwt principal and a header principal share a pseudonym")
	}
}

func TestNoTokenFallsThroughToTheNextSource(t *testing.T) {
	c := newClock()
	r := jwtResolver(t, jwtOptions(staticKeys(t, jwttest.EC(t, "e1")), c.Now))
	for _, req := range []*http.Request{
		request("203.0.113.7:5000"),
		request("203.0.113.7:5000", "Authorization", "Basic YWxhZGRpbjpvcGVuc2VzYW1l"),
		request("203.0.113.7:5000", "Authorization", ""),
	} {
		s, err := r.Resolve(req, subject.Query{Sources: jwtFirst, OperationID: "op"})
		if err != nil || s.Kind != subject.ClientIP {
			t.Fatalf("%v: %v %v", req.Header, s, err)
		}
	}
	// A route that does not list jwt never looks at the token.
	s, err := r.Resolve(bearer("garbage"), subject.Query{Sources: []subject.Kind{subject.ClientIP}, OperationID: "op"})
	if err != nil || s.Kind != subject.ClientIP {
		t.Fatalf("%v %v", s, err)
	}
}

func TestTwoAuthorizationHeadersAreAmbiguous(t *testing.T) {
	c := newClock()
	k := jwttest.EC(t, "e1")
	r := jwtResolver(t, jwtOptions(staticKeys(t, k), c.Now))
	tok := k.Sign(t, jwttest.Claims("alice", c.Now().Add(time.Hour)))
	req := request("203.0.113.7:5000", "Authorization", "Bearer "+tok, "Authorization", "Bearer "+tok)
	if _, err := r.Resolve(req, subject.Query{Sources: jwtFirst, OperationID: "op"}); !errors.Is(err, subject.ErrAmbiguousCredential) {
		t.Fatalf("err %v", err)
	}
}

func TestEveryInvalidTokenIsRefused(t *testing.T) {
	c := newClock()
	good, stranger := jwttest.EC(t, "e1"), jwttest.EC(t, "e2")
	r := jwtResolver(t, jwtOptions(staticKeys(t, good, jwttest.RSA(t, "r1")), c.Now))
	for name, tok := range jwttest.Invalid(t, good, stranger, c.Now()) {
		t.Run(name, func(t *testing.T) {
			req := request("203.0.113.7:5000", "Authorization", "Bearer "+tok)
			s, err := r.Resolve(req, subject.Query{Sources: jwtFirst, OperationID: "op"})
			var te *subject.TokenError
			if !errors.Is(err, subject.ErrInvalidToken) || !errors.As(err, &te) {
				t.Fatalf("got %v %v, want an invalid token", s, err)
			}
			if strings.Contains(err.Error(), "alice") || strings.Contains(err.Error(), tok[:min(len(tok), 10)]) && tok != "" {
				t.Fatalf("the error quotes the token: %v", err)
			}
		})
	}
}

func TestACachedTokenStillExpires(t *testing.T) {
	c := newClock()
	k := jwttest.RSA(t, "r1")
	r := jwtResolver(t, jwtOptions(staticKeys(t, k), c.Now))
	req := bearer(k.Sign(t, jwttest.Claims("alice", c.Now().Add(time.Minute))))
	for range 3 {
		if _, err := r.Resolve(req, subject.Query{Sources: jwtFirst, OperationID: "op"}); err != nil {
			t.Fatal(err)
		}
	}
	c.Advance(time.Minute + 29*time.Second)
	if _, err := r.Resolve(req, subject.Query{Sources: jwtFirst, OperationID: "op"}); err != nil {
		t.Fatalf("within the leeway: %v", err)
	}
	c.Advance(2 * time.Second)
	if _, err := r.Resolve(req, subject.Query{Sources: jwtFirst, OperationID: "op"}); !errors.Is(err, subject.ErrInvalidToken) {
		t.Fatalf("past exp and leeway: %v", err)
	}
}

func TestKeySetsRefuseWhatTheyCannotTrust(t *testing.T) {
	k := jwttest.EC(t, "e1")
	cases := map[string]string{
		"not JSON":            `nope`,
		"no usable key":       `{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`,
		"private material":    `{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA","d":"AA"}]}`,
		"repeated kid":        string(jwttest.JWKS(k, k)),
		"point off the curve": `{"keys":[{"kty":"EC","kid":"x","crv":"P-256","x":"` + strings.Repeat("A", 43) + `","y":"` + strings.Repeat("A", 43) + `"}]}`,
	}
	for name, src := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := subject.ParseKeySet([]byte(src)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	// Keys the gateway does not verify with are skipped, not fatal.
	mixed := `{"keys":[{"kty":"kyber"},{"kty":"EC","crv":"P-256","use":"enc","x":"AA","y":"AA"}` + strings.TrimPrefix(string(jwttest.JWKS(k)), `{"keys":[`)
	mixed = strings.Replace(mixed, `"y":"AA"}{`, `"y":"AA"},{`, 1)
	if _, err := subject.ParseKeySet([]byte(mixed)); err != nil {
		t.Fatalf("%s: %v", mixed, err)
	}
}

// idp serves a key set that a test can rotate or take down, and counts
// the fetches.
type idp struct {
	*httptest.Server
	mu      sync.Mutex
	jwks    []byte
	down    bool
	fetches atomic.Int64
}

func newIDP(t testing.TB, keys ...*jwttest.Key) *idp {
	p := &idp{jwks: jwttest.JWKS(keys...)}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		down, jwks := p.down, p.jwks
		p.mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(jwks)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *idp) serve(keys ...*jwttest.Key) {
	p.mu.Lock()
	p.jwks, p.down = jwttest.JWKS(keys...), false
	p.mu.Unlock()
}

func (p *idp) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

func remoteKeys(t testing.TB, p *idp, c *clock) *subject.RemoteKeys {
	t.Helper()
	rk, err := subject.NewRemoteKeys(subject.RemoteKeysOptions{URL: p.URL, Timeout: 5 * time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return rk
}

func TestARemoteKeySetRotatesAndSurvivesItsProvider(t *testing.T) {
	c := newClock()
	old, next := jwttest.RSA(t, "2026-11"), jwttest.EC(t, "2026-12")
	p := newIDP(t, old)
	rk := remoteKeys(t, p, c)
	if err := rk.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := jwtResolver(t, jwtOptions(rk, c.Now))
	resolve := func(k *jwttest.Key) error {
		_, err := r.Resolve(bearer(k.Sign(t, jwttest.Claims("alice", c.Now().Add(time.Hour)))), subject.Query{Sources: jwtFirst, OperationID: "op"})
		return err
	}

	if err := resolve(old); err != nil || p.fetches.Load() != 1 {
		t.Fatalf("known key: %v after %d fetches", err, p.fetches.Load())
	}

	t.Run("the provider goes down: the keys it served stay", func(t *testing.T) {
		p.setDown(true)
		c.Advance(time.Hour) // past MaxAge: a background fetch fails
		for range 3 {
			if err := resolve(old); err != nil {
				t.Fatal(err)
			}
		}
		// Wait for the background fetch the stale set started.
		for deadline := time.Now().Add(10 * time.Second); p.fetches.Load() < 2; {
			if time.Now().After(deadline) {
				t.Fatal("a set past its max age was not fetched again")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := resolve(old); err != nil {
			t.Fatal(err)
		}
		p.setDown(false)
	})

	t.Run("an unknown kid fetches the set once, and the rotated key verifies", func(t *testing.T) {
		c.Advance(time.Minute)
		p.serve(old, next)
		before := p.fetches.Load()
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for range 20 {
			wg.Go(func() { errs <- resolve(next) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := p.fetches.Load() - before; n != 1 {
			t.Fatalf("%d fetches for 20 tokens with one new kid, want 1", n)
		}
	})

	t.Run("a storm of unknown kids fetches at most once per 10 s", func(t *testing.T) {
		c.Advance(time.Minute)
		before := p.fetches.Load()
		for i := range 50 {
			err := resolve(jwttest.EC(t, "forged-"+string(rune('a'+i%26))))
			if !errors.Is(err, subject.ErrInvalidToken) {
				t.Fatalf("forged kid: %v", err)
			}
			if i == 24 {
				c.Advance(9 * time.Second)
			}
		}
		if n := p.fetches.Load() - before; n != 1 {
			t.Fatalf("%d fetches within 10 s, want 1", n)
		}
		c.Advance(time.Second)
		resolve(jwttest.EC(t, "forged-z"))
		if n := p.fetches.Load() - before; n != 2 {
			t.Fatalf("%d fetches after 10 s, want 2", n)
		}
	})

	t.Run("a withdrawn key stops verifying after a refresh", func(t *testing.T) {
		c.Advance(time.Minute)
		p.serve(next)
		if err := rk.Refresh(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := resolve(old); !errors.Is(err, subject.ErrInvalidToken) {
			t.Fatalf("withdrawn key: %v", err)
		}
		if err := resolve(next); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAKeySetNeverFetchedCannotDecide(t *testing.T) {
	c := newClock()
	k := jwttest.EC(t, "e1")
	p := newIDP(t, k)
	p.setDown(true)
	rk := remoteKeys(t, p, c)
	if err := rk.Refresh(context.Background()); err == nil {
		t.Fatal("a failing provider refreshed")
	}
	r := jwtResolver(t, jwtOptions(rk, c.Now))
	tok := bearer(k.Sign(t, jwttest.Claims("alice", c.Now().Add(time.Hour))))
	if _, err := r.Resolve(tok, subject.Query{Sources: jwtFirst, OperationID: "op"}); !errors.Is(err, subject.ErrKeysUnavailable) {
		t.Fatalf("err %v, want ErrKeysUnavailable", err)
	}
	// No token: the next source still decides.
	if s, err := r.Resolve(request("203.0.113.7:5000"), subject.Query{Sources: jwtFirst, OperationID: "op"}); err != nil || s.Kind != subject.ClientIP {
		t.Fatalf("%v %v", s, err)
	}
	p.setDown(false)
	c.Advance(10 * time.Second)
	if _, err := r.Resolve(tok, subject.Query{Sources: jwtFirst, OperationID: "op"}); err != nil {
		t.Fatalf("after the provider came back: %v", err)
	}
}

// A forged token costs little: its length is checked before anything is
// decoded, its header alone is read to find the key, and its signature is
// checked before its payload is decoded. The reasons say which step
// refused it.
func TestATokenIsRefusedAtTheFirstStepItFails(t *testing.T) {
	c := newClock()
	good, stranger := jwttest.EC(t, "e1"), jwttest.EC(t, "e2")
	r := jwtResolver(t, jwtOptions(staticKeys(t, good, jwttest.RSA(t, "r1")), c.Now))
	invalid := jwttest.Invalid(t, good, stranger, c.Now())
	for name, reason := range map[string]string{
		"longer than 8192 bytes":    "too_large",
		"junk, 16 KiB, unknown kid": "too_large",
		"junk, 6 KiB, known kid":    "bad_signature", // the payload is never decoded
		"kid not a string":          "malformed",
		"kid null":                  "malformed",
		"issued in the future":      "issued_in_future",
		"payload not JSON":          "malformed",
		"alg none":                  "algorithm_not_allowed",
		"algorithm not listed":      "algorithm_not_allowed",
		"unknown kid":               "unknown_key",
		"claims swapped":            "bad_signature",
		"expired":                   "expired",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := r.Resolve(bearer(invalid[name]), subject.Query{Sources: jwtFirst, OperationID: "op"})
			var te *subject.TokenError
			if !errors.As(err, &te) || te.Reason != reason {
				t.Fatalf("err %v, want reason %s", err, reason)
			}
		})
	}
	t.Run("max_token_bytes is the bound", func(t *testing.T) {
		o := jwtOptions(staticKeys(t, good), c.Now)
		o.MaxTokenBytes = 16 << 10
		long := bearer(invalid["longer than 8192 bytes"])
		if _, err := jwtResolver(t, o).Resolve(long, subject.Query{Sources: jwtFirst, OperationID: "op"}); err != nil {
			t.Fatalf("a token within max_token_bytes: %v", err)
		}
	})
	t.Run("iat within the leeway passes", func(t *testing.T) {
		claims := jwttest.Claims("alice", c.Now().Add(time.Hour))
		claims["iat"] = c.Now().Add(20 * time.Second).Unix()
		if _, err := r.Resolve(bearer(good.Sign(t, claims)), subject.Query{Sources: jwtFirst, OperationID: "op"}); err != nil {
			t.Fatal(err)
		}
	})
}

// gate refuses every client and counts who it was asked about.
type gate struct {
	asked []subject.Subject
}

var errGated = errors.New("gated")

func (g *gate) AdmitToken(_ context.Context, client subject.Subject) error {
	g.asked = append(g.asked, client)
	return errGated
}

func TestAGateIsAskedBeforeATokenIsVerified(t *testing.T) {
	c := newClock()
	k := jwttest.EC(t, "e1")
	r := jwtResolver(t, jwtOptions(staticKeys(t, k), c.Now))
	alice := request("203.0.113.7:5000", "Authorization", "Bearer "+k.Sign(t, jwttest.Claims("alice", c.Now().Add(time.Hour))))
	g := &gate{}
	q := subject.Query{Sources: jwtFirst, OperationID: "op", Gate: g}

	if _, err := r.Resolve(alice, q); !errors.Is(err, errGated) {
		t.Fatalf("a token not verified before: %v, want the gate's error", err)
	}
	if _, err := r.Resolve(bearer("junk"), q); !errors.Is(err, errGated) {
		t.Fatalf("junk: %v, want the gate's error", err)
	}
	want := r.ClientSubject(alice)
	if len(g.asked) != 2 || g.asked[0] != want || want.Kind != subject.ClientIP || want.Pseudonym == "" {
		t.Fatalf("the gate was asked about %+v, want the client %+v twice", g.asked, want)
	}
	// The client subject is every route's: an address has one budget for
	// its invalid tokens.
	if other, _ := r.Resolve(request("203.0.113.7:5000"), subject.Query{Sources: jwtFirst, OperationID: "op"}); other.Pseudonym == want.Pseudonym {
		t.Fatal("the client subject is the route's client_ip subject")
	}

	// A token verified before passes without asking.
	if _, err := r.Resolve(alice, subject.Query{Sources: jwtFirst, OperationID: "op"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Resolve(alice, q); err != nil || len(g.asked) != 2 {
		t.Fatalf("a cached token: %v, gate asked %d times", err, len(g.asked))
	}
	// No token, no question.
	if _, err := r.Resolve(request("203.0.113.7:5000"), q); err != nil || len(g.asked) != 2 {
		t.Fatalf("no token: %v, gate asked %d times", err, len(g.asked))
	}
}

// jwks_url was checked where it was configured (https, or http to a
// loopback address); an address it redirects to was not, so a redirect is
// refused and the keys behind it are never trusted.
func TestAJWKSURLThatRedirectsIsNotFollowed(t *testing.T) {
	c := newClock()
	k := jwttest.EC(t, "e1")
	elsewhere := newIDP(t, k)
	for _, status := range []int{http.StatusFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			redirecting := httptest.NewServer(http.RedirectHandler(elsewhere.URL+"/jwks.json", status))
			t.Cleanup(redirecting.Close)
			before := elsewhere.fetches.Load()
			for _, client := range []*http.Client{nil, {}} {
				rk, err := subject.NewRemoteKeys(subject.RemoteKeysOptions{URL: redirecting.URL, Client: client, Now: c.Now})
				if err != nil {
					t.Fatal(err)
				}
				if err := rk.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), "redirect") {
					t.Fatalf("refresh: %v, want a refused redirect", err)
				}
				r := jwtResolver(t, jwtOptions(rk, c.Now))
				tok := bearer(k.Sign(t, jwttest.Claims("alice", c.Now().Add(time.Hour))))
				if _, err := r.Resolve(tok, subject.Query{Sources: jwtFirst, OperationID: "op"}); !errors.Is(err, subject.ErrKeysUnavailable) {
					t.Fatalf("a token signed by the keys behind the redirect: %v", err)
				}
			}
			if n := elsewhere.fetches.Load() - before; n != 0 {
				t.Fatalf("the redirect was followed %d times", n)
			}
		})
	}
}
