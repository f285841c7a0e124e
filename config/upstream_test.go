package config_test

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/config"
	"github.com/edgegate/gateway/proxy"
)

func TestAnUpstreamBlockBecomesAPoolThatRoutesName(t *testing.T) {
	src := `
upstream "legacy-orders" {
  targets          = ["http://10.0.0.11:9000", "https://10.0.0.12:9443/app"]
  balance          = "least_requests"
  connect_timeout  = "2s"
  response_timeout = "30s"
  max_fails        = 0
  fail_timeout     = "15s"
  health {
    path     = "/healthz"
    interval = "5s"
  }
}
route "orders.read" {
  path     = "/orders"
  upstream = "legacy-orders"
}
route "files" {
  path     = "/files"
  upstream = "http://10.0.0.20:8080"
}
`
	f, diags := config.Parse("gateway.hcl", []byte(src), env(nil))
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if len(f.Proxy.Pools) != 1 {
		t.Fatalf("%d pools", len(f.Proxy.Pools))
	}
	p := f.Proxy.Pools[0]
	if p.Name != "legacy-orders" || len(p.Targets) != 2 || p.Targets[1] != "https://10.0.0.12:9443/app" ||
		p.Balance != proxy.LeastRequests || p.ConnectTimeout != 2*time.Second || p.ResponseTimeout != 30*time.Second ||
		p.MaxFails >= 0 || p.FailTimeout != 15*time.Second {
		t.Errorf("pool %+v (max_fails = 0 must mean never, a negative MaxFails)", p)
	}
	if h := p.Health; h == nil || h.Path != "/healthz" || h.Interval != 5*time.Second || h.Timeout != 0 {
		t.Errorf("health %+v", h)
	}
	r := f.Proxy.Routes
	if r[0].Pool != "legacy-orders" || r[0].Upstream != "" {
		t.Errorf("route naming the pool: pool %q upstream %q", r[0].Pool, r[0].Upstream)
	}
	if r[1].Pool != "" || r[1].Upstream != "http://10.0.0.20:8080" {
		t.Errorf("route with a URL: pool %q upstream %q", r[1].Pool, r[1].Upstream)
	}
}

func TestAnUpstreamBlockSaysWhatFailuresMayEject(t *testing.T) {
	for _, c := range []struct {
		name, attrs    string
		ejectOnTimeout bool
		percent        int
	}{
		{"by default", "", false, 0},
		{"with both set", "eject_on_timeout = true\n  max_ejected_percent = 34", true, 34},
		{"with max_ejected_percent = 0, none", "max_ejected_percent = 0", false, -1},
		{"with max_ejected_percent = 100, all but the last", "max_ejected_percent = 100", false, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := "upstream \"u\" {\n  targets = [\"http://10.0.0.11:9000\", \"http://10.0.0.12:9000\"]\n  " + c.attrs + "\n}\n"
			f, diags := config.Parse("gateway.hcl", []byte(src), env(nil))
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			p := f.Proxy.Pools[0]
			if p.EjectOnTimeout != c.ejectOnTimeout || p.MaxEjectedPercent != c.percent {
				t.Errorf("eject on timeout %v, max ejected percent %d; want %v, %d", p.EjectOnTimeout, p.MaxEjectedPercent, c.ejectOnTimeout, c.percent)
			}
		})
	}
}
