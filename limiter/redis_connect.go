package limiter

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// misconfigured reports whether err shows that Redis answered and the
// configuration is wrong for it (credentials, ACL, topology, scripts): a
// start-up error, which waiting will not cure.
func misconfigured(err error) bool {
	return redis.IsAuthError(err) || redis.IsPermissionError(err) ||
		errors.Is(err, errTopology) || errors.Is(err, errScriptMismatch)
}

var (
	errTopology       = errors.New("redis topology is not the configured mode")
	errScriptMismatch = errors.New("redis computed another script hash")
)

// connect loads the scripts and checks the topology until both succeed,
// waiting at most a second between tries.
func (r *Redis) connect() {
	defer close(r.connectDone)
	wait := 50 * time.Millisecond
	for {
		select {
		case <-r.stopConnect:
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := r.tryConnect(ctx)
		cancel()
		if err == nil {
			return
		}
		wait = min(2*wait, time.Second)
	}
}

// tryConnect loads the scripts and checks the topology once; when both
// succeed the backend is connected for good. Both connect and Ready call
// it, so readiness never waits for connect's next try.
func (r *Redis) tryConnect(ctx context.Context) error {
	err := r.load(ctx, 0)
	if err == nil {
		err = r.checkTopology(ctx)
	}
	if err != nil {
		if !r.connected.Load() {
			r.notReady.Store(&err)
		}
		return err
	}
	if !r.connected.Swap(true) {
		r.notReady.Store(nil)
		r.logger.Info("redis reachable; scripts loaded")
	}
	return nil
}

// load registers every script, on every node in Cluster mode. A caller
// that saw NOSCRIPT passes the generation it ran under: if another caller
// has loaded since, there is nothing left to do, so a failover that makes
// every request see NOSCRIPT causes one load, not one per request.
func (r *Redis) load(ctx context.Context, seenGen uint64) error {
	select {
	case r.loading <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for a script load: %w", errNotSent, ctx.Err())
	}
	defer func() { <-r.loading }()
	if r.loadGen.Load() > seenGen {
		return nil
	}
	for _, s := range []*script{r.script, r.leaseScript, r.penaltyScript} {
		sha, err := r.client.ScriptLoad(ctx, s.src).Result()
		if err != nil {
			return fmt.Errorf("load script %s: %w", s.name, err)
		}
		if sha != s.sha {
			return fmt.Errorf("load script %s: server says sha %s, expected %s: %w", s.name, sha, s.sha, errScriptMismatch)
		}
	}
	if seenGen > 0 {
		// A load after one that worked: the server lost the scripts.
		r.m.reloads.Inc()
	}
	r.loadGen.Add(1)
	return nil
}

func (r *Redis) generation() uint64 { return r.loadGen.Load() }

// checkTopology runs the real script path on canary keys spread over the
// hash slots: a standalone client pointed at a Cluster node gets MOVED for
// some of them, which is a configuration error, not a denial.
func (r *Redis) checkTopology(ctx context.Context) error {
	for i := 0; i < 8; i++ {
		if err := r.canary(ctx, "ready-"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	return nil
}

var canaryPolicies = MustPolicySet(canaryPolicy())

// canaryPolicy is a fixed window no canary fills, with NewPolicy's
// defaults; its keys are kept a second past the window.
func canaryPolicy() *Policy {
	p := NewPolicy("canary", FixedWindow)
	p.Limit, p.Window, p.CleanupGrace = 1<<40, time.Second, time.Second
	return p
}

func (r *Redis) canary(ctx context.Context, tag string) error {
	key := r.prefix + "{canary:" + tag + "}"
	c := scriptCall{cost: 1, phase: Admission}
	cmd := r.appendArgs(r.script.command([]string{key}, argsSize(canaryPolicies, c)), canaryPolicies, c)
	_, err := r.evalsha(ctx, cmd)
	if err != nil {
		if _, moved := redis.IsMovedError(err); moved && r.mode != RedisCluster {
			return fmt.Errorf("redis at %s is a Cluster node, but mode is %s: %w: %w", key, r.mode, errTopology, err)
		}
		return fmt.Errorf("redis readiness: %w", err)
	}
	return nil
}

// Ready runs the script path on canary keys, with NOSCRIPT recovery, for
// /readyz: it fails while Redis is unreachable, the ACL denies EVALSHA or
// SCRIPT LOAD, or the topology is not the configured one. Until the backend
// has connected once it tries to connect itself rather than wait for the
// background loop's next try (up to a second away), so it is ready no
// later than the first decision Redis answers.
func (r *Redis) Ready(ctx context.Context) error {
	if !r.connected.Load() {
		if err := r.tryConnect(ctx); err != nil {
			return fmt.Errorf("connecting to redis: %w", err)
		}
		return nil
	}
	return r.checkTopology(ctx)
}

// tlsConfig is the client TLS configuration for RedisOptions: TLS 1.2 at
// least, the system's roots or those of caFile.
func tlsConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("redis tls_ca_file: %w", err)
	}
	cfg.RootCAs = x509.NewCertPool()
	if !cfg.RootCAs.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("redis tls_ca_file %s holds no PEM certificate", caFile)
	}
	return cfg, nil
}
