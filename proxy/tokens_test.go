package proxy_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/subject/jwttest"
)

// Invalid tokens are charged to the client's address, 10 a minute by
// default; past that the client gets 429 for any token not verified
// before, and none of it is verified: a token whose kid the key set does
// not know would fetch the set, and does not.
func TestInvalidTokensAreChargedToTheClientsAddress(t *testing.T) {
	up := newUpstream(t)
	k := jwttest.EC(t, "e1")
	idp := newJWKSServer(t, k)
	clock := limitertest.NewClock() // the key set's
	keys, err := subject.NewRemoteKeys(subject.RemoteKeysOptions{URL: idp.URL, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, setup{
		routes:   []proxy.Route{jwtRoute(t, up, policy(limitertest.FixedWindow(100, time.Minute), "hundred"))},
		resolver: jwtGatewayResolver(t, keys),
	})
	exp := time.Now().Add(time.Hour)
	alice := "Bearer " + k.Sign(t, jwttest.Claims("alice", exp))
	forged := "Bearer " + jwttest.Invalid(t, k, jwttest.EC(t, "e2"), time.Now())["bad_signature"]
	unknownKid := func() string {
		clock.Advance(10 * time.Second) // a fetch is allowed again
		return "Bearer " + jwttest.EC(t, "e-"+strconv.FormatInt(clock.Now().UnixNano(), 36)).Sign(t, jwttest.Claims("alice", exp))
	}

	// A token cached before the client ran out still passes.
	wantStatuses(t, []int{from(t, g, "127.0.0.4", "Authorization", alice).StatusCode}, 200)
	var got []int
	for range 9 {
		got = append(got, from(t, g, "127.0.0.2", "Authorization", forged).StatusCode)
	}
	fetches := idp.fetches.Load()
	got = append(got, from(t, g, "127.0.0.2", "Authorization", unknownKid()).StatusCode)
	if idp.fetches.Load() != fetches+1 {
		t.Fatal("a token with an unknown kid within the budget did not fetch the key set")
	}
	wantStatuses(t, got, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401)

	res := from(t, g, "127.0.0.2", "Authorization", forged)
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" ||
		res.Header.Get("RateLimit-Policy") != `"invalid-token";q=10;w=60` || !strings.HasPrefix(res.Header.Get("RateLimit"), `"invalid-token";r=0;t=`) {
		t.Fatalf("the 11th invalid token: %d, headers %v", res.StatusCode, res.Header)
	}
	fetches = idp.fetches.Load()
	for _, tok := range []string{unknownKid(), unknownKid(), forged, "Bearer junk"} {
		wantStatuses(t, []int{from(t, g, "127.0.0.2", "Authorization", tok).StatusCode}, 429)
	}
	if n := idp.fetches.Load() - fetches; n != 0 {
		t.Fatalf("a client over its budget had %d key set fetches made for it", n)
	}
	// A valid token the gateway has not verified yet is not verified
	// either; one it has still passes, and so does the client without one.
	wantStatuses(t, []int{from(t, g, "127.0.0.2", "Authorization", "Bearer "+k.Sign(t, jwttest.Claims("bob", exp))).StatusCode}, 429)
	wantStatuses(t, []int{from(t, g, "127.0.0.2", "Authorization", alice).StatusCode, from(t, g, "127.0.0.2").StatusCode}, 200, 200)
	// Another address has its own budget.
	wantStatuses(t, []int{from(t, g, "127.0.0.3", "Authorization", forged).StatusCode}, 401)

	g.clock.Advance(time.Minute)
	wantStatuses(t, []int{from(t, g, "127.0.0.2", "Authorization", forged).StatusCode}, 401)

	var denied int
	for _, rec := range accessRecords(t, g) {
		if rec["outcome"] == "denied" {
			denied++
			if rec["reason"] != "invalid_token_budget" || rec["subject_kind"] != "client_ip" || rec["pseudonym"] == "" {
				t.Fatalf("access log %v", rec)
			}
		}
	}
	if denied == 0 || strings.Contains(g.logs.String(), "127.0.0.2") {
		t.Fatalf("%d denials logged; the log must not hold the address", denied)
	}
}

// On Redis the budget is the client's across every instance, and an
// instance that has seen the client refused answers it without Redis.
func TestRedisInvalidTokensShareOneBudgetAcrossInstances(t *testing.T) {
	s := redistest.Start(t)
	up := newUpstream(t)
	k := jwttest.EC(t, "e1")
	keys, err := subject.ParseKeySet(jwttest.JWKS(k))
	if err != nil {
		t.Fatal(err)
	}
	five := redisPolicy(limitertest.FixedWindow(5, time.Hour), "five-invalid")
	var gateways []*gateway
	for range 2 {
		gateways = append(gateways, newGateway(t, setup{
			routes:        []proxy.Route{jwtRoute(t, up, redisPolicy(limitertest.FixedWindow(100, time.Minute), "hundred"))},
			resolver:      jwtGatewayResolver(t, keys),
			limiter:       redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}),
			invalidTokens: five,
		}))
	}
	forged := "Bearer " + jwttest.Invalid(t, k, jwttest.EC(t, "e2"), time.Now())["bad_signature"]
	var got []int
	for i := range 6 {
		got = append(got, from(t, gateways[i%2], "127.0.0.2", "Authorization", forged).StatusCode)
	}
	wantStatuses(t, got, 401, 401, 401, 401, 401, 429)
	calls := func() int64 {
		info := s.Client(t).Info(context.Background(), "commandstats").Val()
		_, rest, _ := strings.Cut(info, "cmdstat_evalsha:calls=")
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		return n
	}
	before := calls()
	res := from(t, gateways[1], "127.0.0.2", "Authorization", forged)
	if res.StatusCode != 429 || res.Header.Get("RateLimit-Policy") != `"five-invalid";q=5;w=3600` {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	if n := calls() - before; n != 0 {
		t.Fatalf("a remembered denial took %d Redis calls", n)
	}
	// The other instance has not seen the refusal: it asks Redis, which
	// refuses, and remembers.
	wantStatuses(t, []int{from(t, gateways[0], "127.0.0.2", "Authorization", forged).StatusCode}, 429)
}

// BenchmarkInvalidToken sets what a forged bearer token costs the
// request path against a plain 429, through the real handler: a bad
// signature (ES256, RS256) and junk tokens just under and over
// max_token_bytes, each while the
// client's budget of invalid tokens lasts (each is checked and charged)
// and once it is spent (refused before any of it is decoded). Compare in
// interleaved rounds:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench InvalidToken -benchtime 2000x ./proxy/; done
func BenchmarkInvalidToken(b *testing.B) {
	ec, rs := jwttest.EC(b, "e1"), jwttest.RSA(b, "r1")
	keys, err := subject.ParseKeySet(jwttest.JWKS(ec, rs))
	if err != nil {
		b.Fatal(err)
	}
	resolver, err := subject.NewResolver(subject.Options{
		PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1,
		JWT: &subject.JWTOptions{Keys: keys, Issuer: "https://idp.test/", Audience: []string{"orders-api"},
			Algorithms: []string{"RS256", "ES256"}},
	})
	if err != nil {
		b.Fatal(err)
	}
	badSignature := func(k *jwttest.Key) string {
		tok := k.Sign(b, jwttest.Claims("alice", time.Now().Add(time.Hour)))
		i := strings.LastIndexByte(tok, '.')
		sig := []byte(tok[i+1:])
		// Another signature of the same length, still base64url: it is
		// checked, and fails.
		if c := &sig[len(sig)/2]; *c == 'A' {
			*c = 'B'
		} else {
			*c = 'A'
		}
		return tok[:i+1] + string(sig)
	}
	tokens := []struct{ name, token string }{
		{"ES256_bad_signature", badSignature(ec)},
		{"RS256_bad_signature", badSignature(rs)},
		{"junk_8KiB", jwttest.Junk(8000, "ES256", "nobody")}, // within max_token_bytes
		{"junk_16KiB", jwttest.Junk(16<<10, "ES256", "nobody")},
	}
	run := func(b *testing.B, invalidTokens *limiter.Policy, token string, status int) {
		m := limiter.NewMemory(limiter.MemoryOptions{})
		defer m.Close()
		p := limitertest.FixedWindow(1, time.Hour)
		p.Dedup = limiter.Dedup{}
		rt := proxy.Route{OperationID: "orders.read", Path: "/orders", Upstream: "http://upstream.invalid", Policies: onePolicy(p),
			Subject: []subject.Kind{subject.JWT, subject.ClientIP}, Cost: 1}
		h, err := proxy.NewHandler(proxy.Options{Transport: &countingTransport{}}, proxy.Config{
			Routes: []proxy.Route{rt}, Resolver: resolver, Limiter: m, InvalidTokenPolicy: invalidTokens,
		})
		if err != nil {
			b.Fatal(err)
		}
		var headers []string
		if token != "" {
			headers = []string{"Authorization", "Bearer " + token}
		}
		// 12 warm requests spend the route's budget, or the default
		// budget of invalid tokens.
		benchServe(b, h, 12, status, headers...)
	}
	lasting := limitertest.FixedWindow(1<<40, time.Hour)
	lasting.Name, lasting.Dedup = "invalid-token", limiter.DefaultDedup
	b.Run("429", func(b *testing.B) { run(b, nil, "", http.StatusTooManyRequests) })
	for _, tok := range tokens {
		b.Run(tok.name+"/budget_lasting", func(b *testing.B) { run(b, lasting, tok.token, http.StatusUnauthorized) })
		b.Run(tok.name+"/budget_spent", func(b *testing.B) { run(b, nil, tok.token, http.StatusTooManyRequests) })
	}
}
