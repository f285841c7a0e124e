package proxy_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/edgegate/gateway/proxy"
)

// A route's rules are the proxy's: each problem names the field it is
// about, so that configuration can point at it, and NewHandler refuses
// the same route for the same reasons.
func TestRouteValidateNamesTheFieldOfEachProblem(t *testing.T) {
	r := proxy.Route{
		OperationID: "r", Rewrite: true, RewritePrefix: "no-slash", HostHeader: "a/b",
		RequestHeaders: proxy.HeaderRules{
			Set:    []proxy.Header{{Name: "X-A", Value: "1"}, {Name: "x-a", Value: "bad\n"}},
			Remove: []string{"X-Forwarded-For"},
		},
		ResponseHeaders: proxy.HeaderRules{Remove: []string{"bad name"}},
		Upgrades:        []string{"websocket", "h2c", "WebSocket"},
	}
	var fields []string
	var earlier string
	for _, e := range r.Validate(nil).(interface{ Unwrap() []error }).Unwrap() {
		var fe *proxy.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is no FieldError", e)
		}
		fields = append(fields, fe.Field)
		if fe.Earlier != "" {
			earlier = fe.Earlier
		}
	}
	want := []string{"rewrite_prefix", "host_header", "request_headers.set[1]", "request_headers.set[1].value",
		"request_headers.remove[0]", "response_headers.remove[0]", "upgrade[1]", "upgrade[2]"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if earlier != "request_headers.set[0]" {
		t.Errorf("the duplicate names %q as the earlier one", earlier)
	}
	ok := proxy.Route{OperationID: "ok", RewritePrefix: "/a//b/", Rewrite: true, Upgrades: []string{"WebSocket"}}
	if err := ok.Validate(nil); err != nil {
		t.Errorf("a rewrite prefix and an upgrade in any accepted form: %v", err)
	}
}
