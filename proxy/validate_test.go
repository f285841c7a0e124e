package proxy_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
)

// A route's rules are the proxy's: each problem names the field it is
// about, so that configuration can point at it, and NewHandler refuses
// the same route for the same reasons.
func TestRouteValidateNamesTheFieldOfEachProblem(t *testing.T) {
	r := proxy.Route{
		OperationID: "r", Path: "/", Upstream: "http://127.0.0.1:9", Rewrite: true, RewritePrefix: "no-slash", HostHeader: "a/b",
		RequestHeaders: proxy.HeaderRules{
			Set:    []proxy.Header{{Name: "X-A", Value: "1"}, {Name: "x-a", Value: "bad\n"}},
			Remove: []string{"X-Forwarded-For"},
		},
		ResponseHeaders: proxy.HeaderRules{Remove: []string{"bad name"}},
		Upgrades:        []string{"websocket", "h2c", "WebSocket"},
	}
	fields, earlier := problemFields(t, r.Validate(nil))
	want := []string{"rewrite_prefix", "host_header", "request_headers.set[1]", "request_headers.set[1].value",
		"request_headers.remove[0]", "response_headers.remove[0]", "upgrade[1]", "upgrade[2]"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if earlier != "request_headers.set[0]" {
		t.Errorf("the duplicate names %q as the earlier one", earlier)
	}
	ok := proxy.Route{OperationID: "ok", Path: "/a//b/", Upstream: "http://127.0.0.1:9", RewritePrefix: "/a//b/", Rewrite: true, Upgrades: []string{"WebSocket"}}
	if err := ok.Validate(nil); err != nil {
		t.Errorf("a path, a rewrite prefix and an upgrade in any accepted form: %v", err)
	}
}

// A policy counts once per route and once per plan, and a plan names at
// least one: the problems are named by the list and the position in it.
func TestRouteValidateNamesRepeatedPoliciesAndEmptyPlans(t *testing.T) {
	a := &limiter.Policy{Name: "a", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 5, Window: time.Second, MaxCost: 1}
	b := &limiter.Policy{Name: "b", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 5, Window: time.Minute, MaxCost: 1}
	r := proxy.Route{OperationID: "r", Path: "/", Upstream: "http://127.0.0.1:9", Policies: []*limiter.Policy{a, b, a},
		Plans: map[string][]*limiter.Policy{"gold": {b, b}, "free": {}, "silver": {a, b}}}
	fields, _ := problemFields(t, r.Validate(nil))
	want := []string{"policies[2]", "plans.free", "plans.gold[1]"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if _, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Routes: []proxy.Route{r}, Limiter: limiter.NewMemory(limiter.MemoryOptions{}), Resolver: newResolver(t, nil)}); err == nil {
		t.Error("NewHandler took a route that Validate refuses")
	}
}

// A route's path is one RoutePath takes, and its cost within the max_cost
// of each of its policies and its plans': the first that allows less is
// named, once.
func TestRouteValidateNamesThePathAndACostAboveMaxCost(t *testing.T) {
	small := &limiter.Policy{Name: "small", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 10, Window: time.Minute, MaxCost: 2}
	smaller := &limiter.Policy{Name: "smaller", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 10, Window: time.Minute, MaxCost: 1}
	large := &limiter.Policy{Name: "large", Algorithm: limiter.FixedWindow, Revision: 1, Limit: 100, Window: time.Minute, MaxCost: 50}
	for _, path := range []string{"", "orders", "/a%2Fb", "/a;b", "/orders."} {
		r := proxy.Route{OperationID: "r", Path: path, Upstream: "http://127.0.0.1:9"}
		if fields, _ := problemFields(t, r.Validate(nil)); !slices.Equal(fields, []string{"path"}) {
			t.Errorf("path %q: fields %q", path, fields)
		}
	}
	r := proxy.Route{OperationID: "r", Path: "/", Upstream: "http://127.0.0.1:9", Cost: 3, Policies: []*limiter.Policy{large},
		Plans: map[string][]*limiter.Policy{"gold": {small, smaller}, "silver": {smaller}}}
	var fe *option.Error
	if err := r.Validate(nil); !errors.As(err, &fe) || fe.Field != "cost" || fe.Detail != `cost is 3 but policy "small" allows at most 2.` {
		t.Errorf("cost above a plan's max_cost: %v", err)
	}
	if p, err := proxy.RoutePath("/a//b/../c/"); p != "/a/c" || err != nil {
		t.Errorf("RoutePath: %q, %v", p, err)
	}
	r.Cost = 2
	r.Plans = map[string][]*limiter.Policy{"gold": {small}}
	if err := r.Validate(nil); err != nil {
		t.Errorf("cost at max_cost: %v", err)
	}
}

// Routes as a list are the proxy's too: a label taken twice is reported
// for that alone, and two routes that match the same requests, as written
// or once folded, are named with the earlier one.
func TestValidateRoutesNamesDuplicatesAndOverlaps(t *testing.T) {
	routes := []proxy.Route{
		{OperationID: "a", Path: "/orders"},
		{OperationID: "a", Path: "/orders"},
		{OperationID: "b", Path: "/orders", Methods: []string{"GET"}},
		{OperationID: "c", Path: "/Orders", CaseInsensitive: true},
		{OperationID: "d", Path: "/orders/v2"},
	}
	var got []string
	for _, e := range proxy.ValidateRoutes(routes).(interface{ Unwrap() []error }).Unwrap() {
		fe := e.(*option.Error)
		got = append(got, fe.Field+" "+fe.Summary+" "+fe.Earlier)
	}
	want := []string{"routes[1].operation_id Duplicate route routes[0]", "routes[2] Routes overlap routes[0]",
		"routes[3] Routes overlap once folded routes[0]", "routes[3] Routes overlap once folded routes[2]"}
	if !slices.Equal(got, want) {
		t.Errorf("problems %q, want %q", got, want)
	}
}

// A pool's name is given once; the second is named with the first.
func TestValidatePoolsNamesADuplicate(t *testing.T) {
	a := "http://10.0.0.11:9000"
	pools := []proxy.Pool{{Name: "a", Targets: []string{a}}, {Name: "b", Targets: []string{a}}, {Name: "a", Targets: []string{a}}}
	fields, earlier := problemFields(t, proxy.ValidatePools(pools))
	if !slices.Equal(fields, []string{"upstreams[2].name"}) || earlier != "upstreams[0]" {
		t.Errorf("fields %q (earlier %q), want the third's name, after the first", fields, earlier)
	}
	if _, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Pools: pools, Limiter: limiter.NewMemory(limiter.MemoryOptions{}), Resolver: newResolver(t, nil)}); err == nil {
		t.Error("NewHandler took two pools of one name")
	}
}

// An upstream's rules are the proxy's too: two spellings of one target, a
// health check slower than its interval (the default one too) and a path
// that is not normalized are each named by field.
func TestPoolValidateNamesTheFieldOfEachProblem(t *testing.T) {
	a, b := "http://10.0.0.11:9000", "http://10.0.0.11:9000/"
	p := proxy.Pool{Name: "u", Targets: []string{a, b}, MaxEjectedPercent: 101,
		Health: &proxy.HealthCheck{Path: "/a/../healthz", Timeout: proxy.DefaultHealthInterval + time.Second}}
	fields, earlier := problemFields(t, p.Validate())
	want := []string{"targets[1]", "max_ejected_percent", "health.path", "health.timeout"}
	if !slices.Equal(fields, want) || earlier != "targets[0]" {
		t.Errorf("fields %q (earlier %q), want %q", fields, earlier, want)
	}
	p = proxy.Pool{Name: "u", Targets: []string{a}, ConnectTimeout: -time.Second, FailTimeout: proxy.MinTimeout / 2,
		ResponseTimeout: proxy.MinTimeout, Health: &proxy.HealthCheck{Path: "/healthz", Interval: -1, Timeout: time.Hour}}
	fields, _ = problemFields(t, p.Validate())
	if want := []string{"connect_timeout", "fail_timeout", "health.interval"}; !slices.Equal(fields, want) {
		t.Errorf("durations below the minimum: fields %q, want %q", fields, want)
	}
}

// A target, of a pool or a route, is an http:// or https:// URL with a
// host and no credentials, query or fragment: each that is not is named by
// its field, beside a good one, with what was written.
func TestValidateNamesEachTargetThatIsNoServerURL(t *testing.T) {
	bad := []string{"ftp://10.0.0.11", "http://user:pw@10.0.0.11", "http://10.0.0.11/?q=1", "http://10.0.0.11/#f",
		"http:///api", "http://[::1", "10.0.0.11:9000", ""}
	p := proxy.Pool{Name: "u", Targets: append([]string{"https://10.0.0.11:9443/app"}, bad...)}
	var want []string
	for i := range bad {
		want = append(want, fmt.Sprintf("targets[%d]", i+1))
	}
	if fields, _ := problemFields(t, p.Validate()); !slices.Equal(fields, want) {
		t.Errorf("pool: fields %q, want %q", fields, want)
	}
	for _, u := range bad {
		r := proxy.Route{OperationID: "r", Path: "/", Upstream: u}
		err := r.Validate(nil)
		if fields, _ := problemFields(t, err); !slices.Equal(fields, []string{"upstream"}) || !strings.Contains(err.Error(), fmt.Sprintf("not %q.", u)) {
			t.Errorf("route upstream %q: fields %q: %v", u, fields, err)
		}
	}
	for _, r := range []proxy.Route{
		{OperationID: "url", Path: "/", Upstream: "https://10.0.0.11:9443/app"},
		{OperationID: "pool", Path: "/", Pool: "legacy"},
	} {
		if err := r.Validate(nil); err != nil {
			t.Errorf("route %s: %v", r.OperationID, err)
		}
	}
}

// The request path's own durations and bounds are held to their
// minimums by Config.Validate, which NewHandler asks: zero takes the
// default, anything else below the minimum is refused.
func TestConfigValidateHoldsTheSettingsToTheirMinimums(t *testing.T) {
	c := proxy.Config{Deadline: -1, FailureRetryAfter: proxy.MinFailureRetryAfter / 2,
		TunnelIdleTimeout: proxy.MinTimeout / 2, BodyReadTimeout: -time.Second, MaxDelayed: -1}
	fields, _ := problemFields(t, c.Validate())
	want := []string{"limiter.deadline", "limiter.failure_retry_after", "listen.tunnel_idle_timeout", "listen.body_read_timeout", "limiter.max_delayed"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	ok := proxy.Config{Deadline: proxy.MinTimeout, FailureRetryAfter: proxy.MinFailureRetryAfter, BodyReadTimeout: proxy.MinTimeout, MaxDelayed: 1}
	if err := ok.Validate(); err != nil {
		t.Errorf("the minimums, and the defaults: %v", err)
	}
	if _, err := proxy.NewHandler(proxy.Options{}, proxy.Config{Limiter: limiter.NewMemory(limiter.MemoryOptions{}), Resolver: newResolver(t, nil), Deadline: -1}); err == nil {
		t.Error("NewHandler took a negative deadline")
	}
}

// problemFields are the fields err's problems name, and the earlier field
// a clash names.
func problemFields(t *testing.T, err error) (fields []string, earlier string) {
	t.Helper()
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *option.Error
		if !errors.As(e, &fe) {
			t.Fatalf("%v is no FieldError", e)
		}
		fields = append(fields, fe.Field)
		if fe.Earlier != "" {
			earlier = fe.Earlier
		}
	}
	return fields, earlier
}
