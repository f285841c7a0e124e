package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgegate/gateway/limiter/redistest"
)

// metricName is how a metric of the gateway or of the Go and process
// collectors is spelt in a PromQL expression, a label_values query or a
// description.
var metricName = regexp.MustCompile(`\b(?:gateway|go|process)_[a-z0-9_]+\b`)

// The dashboard, the alerting rules and their unit test name only metrics
// a running gateway registers: with the memory backend, and with Redis (whose
// metrics only a Redis backend registers).
func TestDeployNamesOnlyExportedMetrics(t *testing.T) {
	used := map[string][]string{} // name: the files using it
	for _, file := range []string{"deploy/dashboard.json", "deploy/alerts.yml", "deploy/alerts_test.yml"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		names := metricName.FindAllString(string(src), -1)
		if len(names) < 5 {
			t.Fatalf("%s names %d metrics: is the pattern still right?", file, len(names))
		}
		for _, n := range names {
			if !slices.Contains(used[n], file) {
				used[n] = append(used[n], file)
			}
		}
	}

	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	registered := map[string]bool{}
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			r := startFile(t, deployConfig(t, backend, up.URL))
			for n := range used {
				if registeredIn(t, r.registry, n) {
					registered[n] = true
				}
			}
		})
	}
	for n, files := range used {
		if !registered[n] {
			t.Errorf("%s names %s, which the gateway does not export", strings.Join(files, " and "), n)
		}
	}
}

// registeredIn reports whether reg has a collector of the metric name, or
// of the histogram whose series name is. A series of a vector without
// children is in no scrape, so the registry is asked instead: registering
// a gauge of that name fails if and only if the name is taken.
func registeredIn(t *testing.T, reg prometheus.Registerer, name string) bool {
	t.Helper()
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe of the deploy test"})
	err := reg.Register(probe)
	if err == nil {
		reg.Unregister(probe)
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				return registeredIn(t, reg, base)
			}
		}
		return false
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		t.Fatalf("a probe of %s was registered before", name)
	}
	return true
}

// deployConfig is a gateway with what the dashboard shows: a policy, a
// shadow policy, a delaying policy, a pool with an overload block, and on
// Redis a fallback.
func deployConfig(t *testing.T, backend, upstream string) string {
	t.Helper()
	limiter := ""
	if backend == "redis" {
		s := redistest.Start(t)
		limiter = pseudonymFromFile + fmt.Sprintf(`
limiter {
  backend = "redis"
  redis {
    addrs      = [%q]
    key_prefix = "deploy:"
  }
  fallback {
    instances = 2
  }
}`, s.Addr)
	}
	return writeGateway(t, anyPorts+fmt.Sprintf(`%s
policy "per-client" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1m"
}
policy "trial" {
  algorithm = "fixed-window"
  limit     = 5
  window    = "1m"
  mode      = "shadow"
}
policy "smooth" {
  algorithm     = "token-bucket"
  capacity      = 10
  refill_tokens = 10
  refill_period = "1s"
  max_delay     = "500ms"
}
upstream "legacy" {
  targets = [%[2]q]
  overload {
    max_in_flight = 8
  }
}
route "orders.read" {
  path     = "/orders"
  upstream = %[2]q
  policies = ["per-client", "trial"]
  subject  = ["client_ip"]
}
route "legacy" {
  path     = "/legacy"
  upstream = "legacy"
  policy   = "smooth"
  subject  = ["client_ip"]
}
`, limiter, upstream))
}

// The dashboard's panels read 0, not "No data", before their first event:
// every series it queries is exported as the gateway starts (on the
// backend that has it), but for those docs/operations.md lists as
// appearing with their first event.
func TestTheDashboardsSeriesAreExportedAtStart(t *testing.T) {
	src, err := os.ReadFile("deploy/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	queried := map[string]bool{}
	for _, n := range metricName.FindAllString(string(src), -1) {
		if strings.HasPrefix(n, "gateway_") {
			queried[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")] = true
		}
	}
	late := seriesAfterTheirFirstEvent(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	exported := map[string]bool{}
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			r := startFile(t, deployConfig(t, backend, up.URL))
			_, body := r.admin(t, "/metrics")
			for _, line := range strings.Split(body, "\n") {
				if name, _, ok := strings.Cut(line, "{"); ok && !strings.HasPrefix(line, "#") {
					exported[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
				} else if name, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
					exported[name] = true
				}
			}
		})
	}
	for n := range queried {
		switch {
		case late[n] && exported[n]:
			t.Errorf("docs/operations.md says %s appears with its first event, but it is exported at start", n)
		case !late[n] && !exported[n]:
			t.Errorf("the dashboard queries %s, which is not exported at start (nor listed in docs/operations.md as appearing with its first event)", n)
		}
	}
}

// seriesAfterTheirFirstEvent are the metrics docs/operations.md lists, in
// its paragraph that starts "Appear with their first event:".
func seriesAfterTheirFirstEvent(t *testing.T) map[string]bool {
	t.Helper()
	ops, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(ops), "\nAppear with their first event:")
	if !ok {
		t.Fatal(`docs/operations.md has no paragraph "Appear with their first event:"`)
	}
	paragraph, _, _ := strings.Cut(after, "\n\n")
	late := map[string]bool{}
	for _, n := range metricName.FindAllString(paragraph, -1) {
		late[n] = true
	}
	return late
}
