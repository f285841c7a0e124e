package proxy_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// TestRLSExactnessAcrossFourGateways: half the clients ask over HTTP, half
// over the rate limit service, four gateways on one Redis (standalone and
// Cluster), five principals: together they are admitted no more than the
// limit in any window, and every window that denied admitted exactly it.
func TestRLSExactnessAcrossFourGateways(t *testing.T) {
	const (
		instances = 4
		clients   = 32
		limit     = 10
		window    = time.Second
		run       = 3 * time.Second
	)
	principals := []string{"alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com", "erin@example.com"}
	for _, topo := range standaloneAndCluster(nil) {
		t.Run(topo.name, func(t *testing.T) {
			opts, servers := topo.backend(t)
			up := newUpstream(t)
			p := redisPolicy(limitertest.FixedWindow(limit, window), "rls-exact-"+limitertest.Subject()[3:11])
			rt := route("orders.read", "/orders", up, t, p)
			rt.Subject = []subject.Kind{subject.Principal, subject.ClientIP}
			var gateways []*gateway
			var rls []rlsv3.RateLimitServiceClient
			for range instances {
				g := newGateway(t, setup{
					routes:   []proxy.Route{rt},
					limiter:  redistest.NewLimiter(t, opts),
					trusted:  []string{"127.0.0.1/32"},
					rlsRules: []proxy.RLSRule{rule("orders", "edge", "orders.read", nil, "principal")},
				})
				gateways = append(gateways, g)
				rls = append(rls, startRLS(t, g))
			}
			overHTTP := httpSender(t)
			send := func(t *testing.T, i int, g *gateway, asPrincipal bool, subject string) (decision, error) {
				if i%2 == 0 {
					return overHTTP(t, i, g, asPrincipal, subject)
				}
				for j := range gateways {
					if gateways[j] == g {
						return sendRLS(rls[j], subject)
					}
				}
				panic("no such gateway")
			}
			exactRun(t, exactSpec{gateways: gateways, servers: servers, up: up, clients: clients, principals: principals,
				limit: limit, window: window, run: run, send: send})
		})
	}
}

// sendRLS asks the rate limit service for principal, as a decision the
// exactness checker reads: OK is a 200, OVER_LIMIT a 429 whose
// Retry-After is the time to the window's end, Unavailable a 503.
func sendRLS(c rlsv3.RateLimitServiceClient, principal string) (decision, error) {
	d := decision{subject: principal, start: time.Now(), rls: true}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{entries("principal=" + principal)}})
	d.end = time.Now()
	switch {
	case status.Code(err) == codes.Unavailable:
		d.status, d.retryAfter = http.StatusServiceUnavailable, "1"
	case err != nil:
		return decision{}, err
	case res.OverallCode == rlsv3.RateLimitResponse_OK:
		d.status = http.StatusOK
	default:
		d.status = http.StatusTooManyRequests
		secs := (res.Statuses[0].DurationUntilReset.AsDuration() + time.Second - 1) / time.Second
		d.retryAfter = strconv.FormatInt(int64(max(secs, 1)), 10)
	}
	return d, nil
}
