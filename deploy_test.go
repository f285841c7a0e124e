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
}`, s.Addr)
	}
	return writeGateway(t, anyPorts+fmt.Sprintf(`%s
policy "per-client" {
  algorithm = "fixed-window"
  limit     = 10
  window    = "1m"
}
route "orders.read" {
  path     = "/orders"
  upstream = %q
  policy   = "per-client"
  subject  = ["client_ip"]
}
`, limiter, upstream))
}
