package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The rls mode drives the rate limit service (listen.ratelimit_grpc) of
// the memory and the Redis gateway (the main mode's files, a limit that
// never denies, plus an rls_rule on the route) with rlsConns connections
// of rlsStreams calls in flight each, from a gRPC client built from
// Envoy's protos in the harness's own process. Each call is one
// descriptor of one of rlsAddresses client addresses. It reports
// decisions a second, the calls' p50 and p99, and the gateway's CPU time
// per decision, in interleaved rounds.
const (
	rlsConns     = 4
	rlsStreams   = 16
	rlsAddresses = 1024
)

// rlsSample is one run against one gateway.
type rlsSample struct {
	decisions int64
	seconds   float64
	p50, p99  time.Duration
	cpuMicros float64 // the gateway's, per decision
	failed    int64
	firstErr  error
}

// rlsTarget is a gateway serving the rate limit service.
type rlsTarget struct {
	name    string
	pid     int
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
}

func (h *harness) runRLS(ctx context.Context, stdout io.Writer) error {
	names := []string{"gateway-memory"}
	if h.redisAddr != "" {
		names = append(names, "gateway-redis")
	} else {
		h.note("redis-server is not installed: no gateway-redis row")
	}
	var targets []*rlsTarget
	for _, name := range names {
		t, err := h.startRLSGateway(ctx, name)
		if err != nil {
			return err
		}
		defer func() {
			for _, c := range t.conns {
				c.Close()
			}
		}()
		targets = append(targets, t)
	}
	samples := map[string][]rlsSample{}
	for round := 1; round <= h.s.rounds; round++ {
		order := slices.Clone(targets)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		for _, t := range order {
			s, err := driveRLS(ctx, t, h.s.warmup, h.s.duration)
			if err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
			h.logf("rls round %d/%d %-15s %7.0f decisions/s  p50 %v  p99 %v  gateway cpu %5.1fµs/decision  failed %d",
				round, h.s.rounds, t.name, float64(s.decisions)/s.seconds, s.p50, s.p99, s.cpuMicros, s.failed)
			if s.firstErr != nil {
				h.logf("rls %s: first failure: %v", t.name, s.firstErr)
			}
			samples[t.name] = append(samples[t.name], s)
		}
	}
	fmt.Fprintf(stdout, "\n### Rate limit service (%d connections × %d calls in flight, %d client addresses, %d rounds of %s)\n\n",
		rlsConns, rlsStreams, rlsAddresses, h.s.rounds, h.s.duration)
	fmt.Fprintln(stdout, "| gateway | decisions/s | p50 ms | p99 ms | gateway CPU µs/decision | failed |")
	fmt.Fprintln(stdout, "| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, t := range targets {
		var rates, p50s, p99s, cpus []float64
		var failed int64
		for _, s := range samples[t.name] {
			rates = append(rates, float64(s.decisions)/s.seconds)
			p50s = append(p50s, s.p50.Seconds()*1e3)
			p99s = append(p99s, s.p99.Seconds()*1e3)
			cpus = append(cpus, s.cpuMicros)
			failed += s.failed
		}
		fmt.Fprintf(stdout, "| %s | %.0f | %.2f | %.2f | %.1f | %d |\n", t.name, median(rates), median(p50s), median(p99s), median(cpus), failed)
	}
	return nil
}

// startRLSGateway starts name's gateway with a rate limit listener and an
// rls_rule that draws on its route, and connects rlsConns clients to it.
func (h *harness) startRLSGateway(ctx context.Context, name string) (*rlsTarget, error) {
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	rls, err := freeAddr()
	if err != nil {
		return nil, err
	}
	redisAddr := ""
	if name == "gateway-redis" {
		redisAddr = h.redisAddr
	}
	conf := gatewayConfig("main", name, listen, admin, h.upstreamAddr, redisAddr, h.s.dedup, false)
	conf = strings.Replace(conf, fmt.Sprintf("  admin            = %q\n", admin),
		fmt.Sprintf("  admin            = %q\n  ratelimit_grpc   = %q\n", admin, rls), 1)
	conf += "\nrls_rule \"bench\" {\n  domain     = \"bench\"\n  descriptor = [\"client_ip\"]\n  route      = \"bench\"\n}\n"
	path := filepath.Join(h.dir, name+"-rls.hcl")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	p, err := h.start(name+"-rls", h.pin.argv(proxyCPU, h.gatewayBin, "run", "-config", path), filepath.Join(h.dir, name+"-rls.log"))
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, p, "http://"+admin+"/readyz", isOK, 20*time.Second); err != nil {
		return nil, err
	}
	t := &rlsTarget{name: name, pid: p.pid()}
	for range rlsConns {
		conn, err := grpc.NewClient(rls, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		t.conns = append(t.conns, conn)
		t.clients = append(t.clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	return t, nil
}

// rlsRequests are the calls the load sends, one per client address.
var rlsRequests = func() []*rlsv3.RateLimitRequest {
	reqs := make([]*rlsv3.RateLimitRequest, rlsAddresses)
	for i := range reqs {
		a := netip.AddrFrom4([4]byte{10, 77, byte(i >> 8), byte(i)})
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "client_ip", Value: a.String()}},
		}}}
	}
	return reqs
}()

// driveRLS warms up, then drives t for d and returns what it answered.
func driveRLS(ctx context.Context, t *rlsTarget, warmup, d time.Duration) (rlsSample, error) {
	run := func(d time.Duration) (ok, failed int64, latencies []time.Duration, firstErr error) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		var (
			wg             sync.WaitGroup
			mu             sync.Mutex
			okN, failedN   atomic.Int64
			next           atomic.Int64
			firstErrOnce   sync.Once
			allLatencies   []time.Duration
			recordFirstErr = func(err error) { firstErrOnce.Do(func() { firstErr = err }) }
		)
		for _, c := range t.clients {
			for range rlsStreams {
				wg.Go(func() {
					var mine []time.Duration
					for ctx.Err() == nil {
						req := rlsRequests[next.Add(1)%rlsAddresses]
						start := time.Now()
						// The call is not bound to the run: one cut off
						// at its end would be no failure of the gateway's.
						res, err := c.ShouldRateLimit(context.Background(), req)
						mine = append(mine, time.Since(start))
						if err != nil || res.OverallCode != rlsv3.RateLimitResponse_OK {
							failedN.Add(1)
							if err == nil {
								err = fmt.Errorf("overall code %v", res.OverallCode)
							}
							recordFirstErr(err)
							continue
						}
						okN.Add(1)
					}
					mu.Lock()
					allLatencies = append(allLatencies, mine...)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		return okN.Load(), failedN.Load(), allLatencies, firstErr
	}
	run(warmup)
	if ctx.Err() != nil {
		return rlsSample{}, ctx.Err()
	}
	before, err := gatewayTicks(t.pid)
	if err != nil {
		return rlsSample{}, err
	}
	started := time.Now()
	ok, failed, latencies, firstErr := run(d)
	seconds := time.Since(started).Seconds()
	after, err := gatewayTicks(t.pid)
	if err != nil {
		return rlsSample{}, err
	}
	if ok == 0 {
		return rlsSample{}, fmt.Errorf("no call answered OK (%d failed; first: %v)", failed, firstErr)
	}
	slices.Sort(latencies)
	at := func(q float64) time.Duration { return latencies[int(q*float64(len(latencies)-1))] }
	cpu := float64(after-before) / clockTicksPerSecond
	return rlsSample{decisions: ok, seconds: seconds, p50: at(0.50), p99: at(0.99), cpuMicros: cpu / float64(ok) * 1e6,
		failed: failed, firstErr: firstErr}, ctx.Err()
}
