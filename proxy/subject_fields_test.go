package proxy_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// fieldKinds parses the kinds of a route's subject list.
func fieldKinds(t *testing.T, names ...string) []subject.Kind {
	t.Helper()
	var kinds []subject.Kind
	for _, n := range names {
		k, err := subject.ParseKind(n)
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, k)
	}
	return kinds
}

// fieldsGateway is a gateway whose one route takes two requests a minute
// per subject, identified by header, cookie, query parameter, then address.
func fieldsGateway(t *testing.T, redis bool) (*gateway, *upstream, *redistest.Server) {
	up := newUpstream(t)
	p := policy(limitertest.FixedWindow(2, time.Minute), "two")
	s := setup{}
	var srv *redistest.Server
	if redis {
		srv = redistest.Start(t)
		p = redisPolicy(limitertest.FixedWindow(2, time.Minute), "two")
		s.limiter = redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{srv.Addr}})
	}
	r := route("tenants", "/", up, t, p)
	r.Subject = fieldKinds(t, "header:x-tenant", "cookie:session", "query:key", "client_ip")
	s.routes = []proxy.Route{r}
	return newGateway(t, s), up, srv
}

func problemTypeOf(t *testing.T, body []byte) string {
	t.Helper()
	var p struct{ Type string }
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return p.Type
}

func TestSubjectFromHeaderCookieAndQuery(t *testing.T) {
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			g, up, srv := fieldsGateway(t, backend == "redis")
			// Each source is a budget of its own, and the same value under
			// two sources is two subjects.
			wantStatuses(t, statuses(t, g, "/", 3, "X-Tenant", "acme"), 200, 200, 429)
			wantStatuses(t, statuses(t, g, "/", 3, "Cookie", "session=acme"), 200, 200, 429)
			wantStatuses(t, statuses(t, g, "/?key=acme", 3), 200, 200, 429)
			wantStatuses(t, statuses(t, g, "/", 1, "X-Tenant", "globex"), 200)
			// The header comes first: a cookie beside it changes nothing.
			wantStatuses(t, statuses(t, g, "/", 1, "X-Tenant", "acme", "Cookie", "session=new"), 429)
			// An empty or absent field falls through to the next source.
			wantStatuses(t, statuses(t, g, "/", 1, "X-Tenant", "", "Cookie", "session=acme"), 429)
			wantStatuses(t, statuses(t, g, "/?key=", 1, "Cookie", "session="), 200)
			wantStatuses(t, statuses(t, g, "/?other=1", 2), 200, 429) // the address's budget
			// The query value is decoded once: %61 is "a", %2561 is "%61".
			wantStatuses(t, statuses(t, g, "/?key=%61cme", 1), 429)
			wantStatuses(t, statuses(t, g, "/?key=%2561cme", 2), 200, 200)
			wantStatuses(t, statuses(t, g, "/?key=%252561cme", 1), 200)
			wantStatuses(t, statuses(t, g, "/?k%65y=acme", 1), 429)
			if n := up.count(); n != 12 {
				t.Fatalf("upstream saw %d requests, want 12", n)
			}
			if srv != nil {
				dump := redisDump(t, srv)
				for _, raw := range []string{"acme", "globex", "127.0.0.1"} {
					if strings.Contains(dump, raw) {
						t.Fatalf("Redis holds %q:\n%s", raw, dump)
					}
				}
			}
			if logs := g.logs.String(); strings.Contains(logs, "acme") || strings.Contains(logs, "globex") {
				t.Fatalf("the log holds a raw value:\n%s", logs)
			}
			if !strings.Contains(g.logs.String(), `"subject_kind":"header:X-Tenant"`) {
				t.Fatalf("no access line names the kind header:X-Tenant:\n%s", g.logs.String())
			}
		})
	}
}

func TestSubjectFieldsRefuseBadValues(t *testing.T) {
	g, up, _ := fieldsGateway(t, false)
	long := strings.Repeat("a", subject.MaxFieldBytes+1)
	for _, c := range []struct {
		name     string
		target   string
		headers  []string
		wantType string
	}{
		{"a header over 256 bytes", "/", []string{"X-Tenant", long}, "bad-subject"},
		{"a cookie over 256 bytes", "/", []string{"Cookie", "session=" + long}, "bad-subject"},
		{"a query value over 256 bytes", "/?key=" + long, nil, "bad-subject"},
		{"a query value over 256 bytes once decoded", "/?key=" + strings.Repeat("%61", subject.MaxFieldBytes+1), nil, "bad-subject"},
		{"a huge query value", "/?key=" + strings.Repeat("b", 6000), nil, "bad-subject"},
		{"a query value with a bad escape", "/?key=%zz", nil, "bad-subject"},
		{"a header sent twice", "/", []string{"X-Tenant", "a", "X-Tenant", "b"}, "ambiguous-credential"},
		{"a cookie sent twice", "/", []string{"Cookie", "session=a; session=b"}, "ambiguous-credential"},
		{"a query parameter sent twice", "/?key=a&key=b", nil, "ambiguous-credential"},
		{"a query parameter sent twice, once encoded", "/?key=a&%6bey=a", nil, "ambiguous-credential"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := g.get(t, c.target, c.headers...)
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != 400 || problemTypeOf(t, body) != "urn:edge-gateway:problem:"+c.wantType {
				t.Fatalf("%d %s, want 400 %s", res.StatusCode, body, c.wantType)
			}
		})
	}
	if up.count() != 0 {
		t.Fatalf("upstream saw %d requests", up.count())
	}
	// 256 bytes is taken.
	wantStatuses(t, statuses(t, g, "/", 1, "X-Tenant", long[1:]), 200)
	if strings.Contains(g.logs.String(), long[1:]) {
		t.Fatal("the log holds a raw value")
	}
}

// redisDump is every key of srv and what it holds, as text.
func redisDump(t *testing.T, srv *redistest.Server) string {
	admin := srv.Client(t)
	ctx := context.Background()
	keys, _ := admin.Keys(ctx, "*").Result()
	var dump strings.Builder
	for _, k := range keys {
		dump.WriteString(k + "\n")
		switch admin.Type(ctx, k).Val() {
		case "hash":
			for f, v := range admin.HGetAll(ctx, k).Val() {
				dump.WriteString(f + "=" + v + "\n")
			}
		case "string":
			dump.WriteString(admin.Get(ctx, k).Val() + "\n")
		case "list":
			dump.WriteString(strings.Join(admin.LRange(ctx, k, 0, -1).Val(), ",") + "\n")
		}
	}
	return dump.String()
}
