package subject_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/subject/jwttest"
)

// Each fetch of a jwks_url set is counted by result, and the last success
// time moves only on success, so its age tells how long the provider has
// been failing.
func TestJWKSFetchesAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := subject.NewJWKSMetrics(reg)
	c := newClock()
	p := newIDP(t, jwttest.RSA(t, "k1"))
	rk, err := subject.NewRemoteKeys(subject.RemoteKeysOptions{URL: p.URL, Timeout: 5 * time.Second, Now: c.Now, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	check := func(ok, failed, lastSuccess float64) {
		t.Helper()
		got := map[string]float64{}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, s := range f.GetMetric() {
				name := f.GetName()
				for _, l := range s.GetLabel() {
					name += "{" + l.GetValue() + "}"
				}
				got[name] = s.GetCounter().GetValue() + s.GetGauge().GetValue()
			}
		}
		want := map[string]float64{
			"gateway_jwks_fetches_total{ok}":              ok,
			"gateway_jwks_fetches_total{failed}":          failed,
			"gateway_jwks_last_success_timestamp_seconds": lastSuccess,
		}
		for name, v := range want {
			if got[name] != v {
				t.Fatalf("%s = %v, want %v (all: %v)", name, got[name], v, got)
			}
		}
	}
	check(0, 0, 0)

	if err := rk.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := float64(c.Now().Unix())
	check(1, 0, first)

	c.Advance(time.Minute)
	p.setDown(true)
	if err := rk.Refresh(context.Background()); err == nil {
		t.Fatal("a provider that answers 502 was fetched")
	}
	check(1, 1, first)

	c.Advance(time.Minute)
	p.setDown(false)
	if err := rk.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	check(2, 1, float64(c.Now().Unix()))

	if n := testutil.CollectAndCount(reg, "gateway_jwks_fetches_total"); n != 2 {
		t.Fatalf("%d series of gateway_jwks_fetches_total, want ok and failed", n)
	}
}
