package proxy_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/proxy"
)

// A query parameter given twice is ambiguous: every admin call refuses it
// with 400 rather than act on one of the values (a DELETE on the first
// subject named, say).
func TestTheAdminAPIRefusesARepeatedQueryParameter(t *testing.T) {
	p := policy(limitertest.FixedWindow(2, time.Minute), "per-key")
	g := newGateway(t, setup{routes: []proxy.Route{overridesRoute(t, p)}, adminToken: testAdminToken})
	key := []string{"X-API-Key", "known-key-one"}
	wantStatuses(t, statuses(t, g, "/mail", 3, key...), 200, 200, 429)
	status, _ := adminCall(t, g, "PUT", overridePath("known-key-one"), overrideBody(5, time.Now().Add(365*24*time.Hour)))
	if status != http.StatusOK {
		t.Fatalf("PUT: %d", status)
	}

	one := "route=mail.send&subject=api_key%3Aknown-key-one"
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/routes?x=1&x=2", ""},
		{"GET", "/v1/limits?" + one + "&route=mail.send", ""},
		{"DELETE", "/v1/limits?" + one + "&subject=api_key%3Aknown-key-two", ""},
		{"DELETE", "/v1/limits?" + one + "&plan=a&plan=b", ""},
		{"GET", "/v1/overrides?route=a&route=b", ""},
		{"PUT", "/v1/overrides?" + one + "&subject=api_key%3Aknown-key-two", overrideBody(9, time.Now().Add(365*24*time.Hour))},
		{"DELETE", "/v1/overrides?" + one + "&policy=per-key&policy=per-key", ""},
		{"DELETE", "/v1/overrides?" + one + "&policy=per-key&subject=api_key%3Aknown-key-two", ""},
		{"DELETE", "/v1/limits?" + one + "&%zz", ""}, // a query that does not parse
	} {
		status, body := adminCall(t, g, c.method, c.path, c.body)
		if status != http.StatusBadRequest || !strings.Contains(body, "urn:edge-gateway:problem:admin-bad-query") {
			t.Errorf("%s %s: %d %s, want 400 admin-bad-query", c.method, c.path, status, body)
		}
	}
	// Nothing was reset, set or deleted.
	wantStatuses(t, statuses(t, g, "/mail", 4, key...), 200, 200, 200, 429)
	if list := listOverrides(t, g); len(list) != 1 || list[0].Limit != 5 {
		t.Fatalf("overrides %+v", list)
	}
}
