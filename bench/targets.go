package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// targetOrder is the order each round drives the targets in.
var targetOrder = []string{"upstream-direct", "bare-proxy", "gateway-memory", "gateway-redis", "gateway-redis-inflight", "gateway-redis-lease", "nginx"}

// target is one URL the loader drives, and the process whose CPU time is
// charged to it (with its descendants).
type target struct {
	name      string
	url       string
	proc      *process
	admin     string // the gateway's admin address; "" for the other targets
	accessLog string // a JSON-lines access log, emptied after each run; "" for none
	redis     bool   // charge EVALSHA calls to it
	// subjects above 1: each request comes from the next of this many
	// client addresses (see loader), and hotKey names the target of the
	// same process driven from one address, which it is compared with.
	subjects int
	hotKey   string
	// rotationFrom is the rotation's first address of the next run.
	rotationFrom int
}

// rotationName is the name of the target that drives name's process from
// a rotation of subjects addresses: gateway-memory-100k-subjects.
func rotationName(name string, subjects int) string {
	n := strconv.Itoa(subjects)
	if subjects%1000 == 0 {
		n = strconv.Itoa(subjects/1000) + "k"
	}
	return name + "-" + n + "-subjects"
}

// The pseudonym secret the gateways read with file(). It is fake, on
// purpose and visibly: it signs load-test pseudonyms and nothing else.
const (
	pseudonymSecretFile = "pseudonym-secret.txt"
	fakePseudonymSecret = "FAKE-bench-only-pseudonym-secret-not-for-any-real-gateway"
)

// Policies of the two modes: main never denies, flood holds one subject
// over five requests a minute. Main's window is long, about the longest
// the gateway accepts for a billion requests (TestGatewayConfigsAreValid),
// so that a subject of the rotation (-subjects) finds the state of its
// turn in the round before, as the hot key finds its own: under a
// minute's window, with other targets' rounds between two of its own,
// nearly every request of the rotation started its subject's window
// afresh (a new key on Redis), a load the hot key never sees.
var (
	modeLimits  = map[string]int64{"main": 1_000_000_000, "flood": 5}
	modeWindows = map[string]string{"main": "30m", "flood": "1m"}
)

// startTargets starts the mode's targets, in targetOrder. Flood mode has
// no use for the targets that do not limit.
func (h *harness) startTargets(ctx context.Context, mode string) ([]*target, error) {
	var targets []*target
	for _, name := range targetOrder {
		if !h.wants(name) {
			continue
		}
		var t *target
		var err error
		switch name {
		case "upstream-direct":
			if mode == "main" {
				t = &target{name: name, url: "http://" + h.upstreamAddr + "/", proc: h.upstream}
			}
		case "bare-proxy":
			if mode == "main" {
				t, err = h.startBareProxy(ctx)
			}
		case "gateway-memory":
			t, err = h.startGateway(ctx, mode, name, false, false)
		case "gateway-redis":
			if h.redisAddr != "" {
				t, err = h.startGateway(ctx, mode, name, true, false)
			}
		case "gateway-redis-inflight", "gateway-redis-lease":
			// A concurrency limit has no flood to hold: a request in flight
			// gives its lease back when it ends. A lease of budget is for a
			// hot key under its limit: over it, the denial cache answers
			// as without one.
			if mode == "main" && h.redisAddr != "" {
				t, err = h.startGateway(ctx, mode, name, true, false)
			}
		case "nginx":
			if h.nginxBin != "" {
				t, err = h.startNginx(ctx, mode)
			}
		}
		if err != nil {
			return nil, err
		}
		if t != nil && t.admin != "" && h.baselineBin != "" {
			// The baseline's twin first: it is the ratio's denominator.
			b, err := h.startGateway(ctx, mode, name, t.redis, true)
			if err != nil {
				return nil, err
			}
			targets = append(targets, b)
			if pair := [2]string{name, b.name}; !slices.Contains(h.baselines, pair) { // -mode both starts them twice
				h.baselines = append(h.baselines, pair)
			}
		}
		if t != nil {
			targets = append(targets, t)
			if h.s.subjects > 1 && mode == "main" && (name == "gateway-memory" || name == "gateway-redis") {
				r := *t
				r.name, r.subjects, r.hotKey = rotationName(name, h.s.subjects), h.s.subjects, name
				targets = append(targets, &r)
				h.rotations = append(h.rotations, [2]string{r.name, name})
			}
		}
	}
	return targets, nil
}

func (h *harness) startBareProxy(ctx context.Context) (*target, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p, err := h.start("bare-proxy", h.pin.argv(proxyCPU, self, "internal-bare-proxy", "-listen", addr, "-upstream", "http://"+h.upstreamAddr),
		filepath.Join(h.dir, "bare-proxy.log"))
	if err != nil {
		return nil, err
	}
	t := &target{name: "bare-proxy", url: "http://" + addr + "/", proc: p}
	return t, waitHTTP(ctx, p, t.url, isOK, 10*time.Second)
}

// startGateway writes a configuration, has the gateway validate it, starts
// the gateway with its stderr (the access log) appended to a file and waits
// for /readyz. With baseline, it is the -baseline build, named
// <name>@<commit>, with name's configuration.
func (h *harness) startGateway(ctx context.Context, mode, name string, withRedis, baseline bool) (*target, error) {
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeAddr()
	if err != nil {
		return nil, err
	}
	redisAddr := ""
	if withRedis {
		redisAddr = h.redisAddr
	}
	label, bin := name, h.gatewayBin
	if baseline {
		label, bin = name+"@"+h.baselineRev, h.baselineBin
	}
	conf := filepath.Join(h.dir, label+"-"+mode+".hcl")
	trustLoad := h.s.subjects > 1 && mode == "main"
	if err := os.WriteFile(conf, []byte(gatewayConfig(mode, name, listen, admin, h.upstreamAddr, redisAddr, h.s.dedup, trustLoad)), 0o644); err != nil {
		return nil, err
	}
	p, err := h.launchGateway(ctx, label, bin, conf, admin, filepath.Join(h.dir, label+"-"+mode+".log"))
	if err != nil {
		return nil, err
	}
	return &target{name: label, url: "http://" + listen + "/", proc: p, admin: admin, accessLog: p.logPath, redis: withRedis}, nil
}

// launchGateway has the gateway validate conf, starts it on the proxy CPU
// with its output appended to logPath and waits until admin answers
// /readyz.
func (h *harness) launchGateway(ctx context.Context, name, bin, conf, admin, logPath string) (*process, error) {
	if out, err := exec.CommandContext(ctx, bin, "validate", "-config", conf).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("gateway validate %s: %w\n%s", conf, err, out)
	}
	p, err := h.start(name, h.pin.argv(proxyCPU, bin, "run", "-config", conf), logPath)
	if err != nil {
		return nil, err
	}
	return p, waitHTTP(ctx, p, "http://"+admin+"/readyz", isOK, 20*time.Second)
}

// gatewayConfig is the gateway's file for a mode: one route, one policy,
// the client address as the only subject (every request of the load comes
// from 127.0.0.1: one hot key), the access log on. With redisAddr set the
// limiter is Redis; the files differ in nothing else. De-duplication is
// the policy's default (on) unless dedup is false. The target
// gateway-redis-inflight has a concurrency limit of the mode's number in
// flight instead of a fixed window: each request then costs an acquire
// and a release; gateway-redis-lease has the fixed window with lease = 50,
// so the hot key costs Redis a call per 50 requests. With
// trustLoad the load side (127.0.0.1) is a trusted proxy, so a request
// that names a client in X-Forwarded-For counts against that client: how
// the rotation of subjects is driven. A request without the header still
// comes from 127.0.0.1, the hot key.
func gatewayConfig(mode, name, listen, admin, upstream, redisAddr string, dedup, trustLoad bool) string {
	limiter := `limiter {
  backend = "memory"
}`
	if redisAddr != "" {
		limiter = fmt.Sprintf(`limiter {
  backend = "redis"
  redis {
    mode       = "standalone"
    addrs      = [%q]
    key_prefix = "bench:"
  }
}`, redisAddr)
	}
	subject := ""
	if trustLoad {
		subject = `
# The load side is a proxy for its rotation of clients (-subjects).
subject {
  trusted_proxies = ["127.0.0.1/32"]
}
`
	}
	policy := fmt.Sprintf("algorithm = \"fixed-window\"\n  limit     = %d\n  window    = %q", modeLimits[mode], modeWindows[mode])
	switch name {
	case "gateway-redis-inflight":
		policy = fmt.Sprintf("algorithm = \"concurrency\"\n  limit     = %d", modeLimits[mode])
	case "gateway-redis-lease":
		policy += "\n  lease     = 50"
	}
	return fmt.Sprintf(`# Written by go run ./bench for one load test; removed when it ends.
listen {
  http             = %q
  admin            = %q
  shutdown_timeout = "1s"
  # Every connection of the load comes from 127.0.0.1: one client.
  max_connections_per_client = 0
}

%s

# The secret in this file is fake: it signs load-test pseudonyms only.
pseudonym {
  version = 1
  key "1" { secret = file(%q) }
}

log {
  level  = "info"
  access = true
}
%s
policy "bench-%s" {
  %s
  dedup {
    enabled = %t
  }
}

route "bench" {
  path     = "/"
  upstream = "http://%s"
  policy   = "bench-%s"
  subject  = ["client_ip"]
}
`, listen, admin, limiter, pseudonymSecretFile, subject, mode, policy, dedup, upstream, mode)
}

// startNginx runs nginx in the foreground with one worker, its prefix,
// configuration, logs and temporary files in a folder of its own. An nginx
// that cannot run here is a note in the report, not a failure: it is only
// the reference.
func (h *harness) startNginx(ctx context.Context, mode string) (*target, error) {
	prefix := filepath.Join(h.dir, "nginx-"+mode)
	if err := os.Mkdir(prefix, 0o755); err != nil {
		return nil, err
	}
	listen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(prefix, "nginx.conf")
	if err := os.WriteFile(conf, []byte(nginxConfig(mode, prefix, listen, h.upstreamAddr)), 0o644); err != nil {
		return nil, err
	}
	errorLog := filepath.Join(prefix, "error.log")
	argv := []string{h.nginxBin, "-e", errorLog, "-p", prefix, "-c", conf, "-g", "daemon off;"}
	if out, err := exec.CommandContext(ctx, argv[0], append(argv[1:], "-t")...).CombinedOutput(); err != nil {
		h.note("nginx cannot use its configuration, no nginx rows in %s mode: %v: %s", mode, err, strings.TrimSpace(string(out)))
		return nil, nil
	}
	p, err := h.start("nginx", h.pin.argv(proxyCPU, argv...), filepath.Join(prefix, "stderr.log"))
	if err != nil {
		h.note("nginx does not start, no nginx rows in %s mode: %v", mode, err)
		return nil, nil
	}
	t := &target{name: "nginx", url: "http://" + listen + "/", proc: p, accessLog: filepath.Join(prefix, "access.log")}
	anyAnswer := func(int) bool { return true }
	if err := waitHTTP(ctx, p, t.url, anyAnswer, 10*time.Second); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		p.stop()
		h.note("nginx does not answer, no nginx rows in %s mode: %v", mode, err)
		return nil, nil
	}
	return t, nil
}

// nginxConfig is the reference: one worker, keep-alive to the upstream,
// limit_req on the client address, and an access log of JSON lines about
// as long as the gateway's. Main mode's rate and burst are too high to
// deny; flood mode allows 5 requests a minute (one every 12s, nginx's leaky
// bucket) with no burst.
func nginxConfig(mode, prefix, listen, upstream string) string {
	limit := "rate=1000000r/s"
	burst := "burst=1000000 nodelay"
	if mode == "flood" {
		limit, burst = "rate=5r/m", "nodelay"
	}
	return fmt.Sprintf(`# Written by go run ./bench for one load test; removed when it ends.
worker_processes 1;
worker_rlimit_nofile 16384;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log error;

events {
  worker_connections 8192;
}

http {
  client_body_temp_path %[1]s/client_body;
  proxy_temp_path       %[1]s/proxy;
  fastcgi_temp_path     %[1]s/fastcgi;
  uwsgi_temp_path       %[1]s/uwsgi;
  scgi_temp_path        %[1]s/scgi;

  log_format bench escape=json '{"time":"$time_iso8601","method":"$request_method","uri":"$uri","status":$status,"bytes":$body_bytes_sent,"duration":$request_time,"upstream_duration":"$upstream_response_time","remote":"$remote_addr"}';
  access_log %[1]s/access.log bench;

  limit_req_zone $binary_remote_addr zone=bench:1m %[4]s;
  limit_req_status 429;
  limit_req_log_level warn;

  upstream backend {
    server %[3]s;
    keepalive 1024;
  }

  server {
    listen %[2]s;
    location / {
      limit_req zone=bench %[5]s;
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`, prefix, listen, upstream, limit, burst)
}
