package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter/redistest"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// running is a gateway started through the CLI, in this process.
type running struct {
	*gateway
	path   string
	logs   *lockedBuffer
	exited chan struct{} // closed when run returned; code is then set
	code   int
}

func writeConfig(t *testing.T, path, upstream string, revision, limit int) {
	t.Helper()
	src := fmt.Sprintf(`
listen {
  http             = "127.0.0.1:0"
  admin            = "127.0.0.1:0"
  shutdown_timeout = "5s"
}
policy "per-client" {
  algorithm = "fixed-window"
  limit     = %d
  window    = "1h"
  revision  = %d
}
route "orders.read" {
  path     = "/orders"
  upstream = %q
  policy   = "per-client"
  subject  = ["client_ip"]
}
`, limit, revision, upstream)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// anyPorts is a listen block on free loopback ports.
const anyPorts = `
listen {
  http  = "127.0.0.1:0"
  admin = "127.0.0.1:0"
}
`

// pseudonymFromFile is a pseudonym block whose key is the secret that
// writeGateway puts beside the file.
const pseudonymFromFile = `
pseudonym {
  version = 1
  key "1" { secret = file("hmac") }
}
`

// writeGateway writes src as gateway.hcl in a new directory, beside the
// HMAC secret file "hmac" that pseudonymFromFile reads, and returns its
// path.
func writeGateway(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hmac"), []byte("test-only-fake-hmac-secret-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func start(t *testing.T, upstream string) *running {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.hcl")
	writeConfig(t, path, upstream, 1, 2)
	return startFile(t, path)
}

func startFile(t *testing.T, path string) *running {
	t.Helper()
	r := &running{path: path, logs: &lockedBuffer{}, exited: make(chan struct{})}
	started := make(chan *gateway, 1)
	go func() {
		r.code = run([]string{"run", "-config", path}, nil, io.Discard, r.logs, started)
		close(r.exited)
	}()
	select {
	case r.gateway = <-started:
	case <-r.exited:
		t.Fatalf("gateway exited with %d:\n%s", r.code, r.logs.String())
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not start")
	}
	t.Cleanup(func() {
		select {
		case <-r.exited:
		default:
			// Only while run watches signals: SIGTERM would end the test
			// binary otherwise.
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
			<-r.exited
		}
	})
	return r
}

func (r *running) get(t *testing.T, path string) *http.Response {
	t.Helper()
	res, err := http.Get("http://" + r.servers.HTTPAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

func (r *running) admin(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := http.Get("http://" + r.servers.AdminAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// reload sends a real SIGHUP and waits until the reload counter for result
// moves.
func (r *running) reload(t *testing.T, result string) {
	t.Helper()
	metric := fmt.Sprintf(`gateway_config_reloads_total{result=%q}`, result)
	before := r.metricValue(t, metric)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if r.metricValue(t, metric) > before {
			return
		}
	}
	t.Fatalf("no %s reload observed:\n%s", result, r.logs.String())
}

func (r *running) metricValue(t *testing.T, series string) float64 {
	_, body := r.admin(t, "/metrics")
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func statusesOf(t *testing.T, r *running, n int) string {
	var s []string
	for i := 0; i < n; i++ {
		s = append(s, fmt.Sprint(r.get(t, "/orders").StatusCode))
	}
	return strings.Join(s, " ")
}

func TestReload(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	r := start(t, up.URL)

	if got := statusesOf(t, r, 3); got != "200 200 429" {
		t.Fatalf("before reload: %s", got)
	}
	t.Run("the same revision keeps the budget", func(t *testing.T) {
		writeConfig(t, r.path, up.URL, 1, 2)
		r.reload(t, "ok")
		if got := statusesOf(t, r, 1); got != "429" {
			t.Fatalf("after reload: %s", got)
		}
	})
	t.Run("a broken file keeps the old configuration", func(t *testing.T) {
		if err := os.WriteFile(r.path, []byte("route \"x\" {\n  path = 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r.reload(t, "error")
		if got := statusesOf(t, r, 1); got != "429" {
			t.Fatalf("after a broken reload: %s", got)
		}
		if !strings.Contains(r.logs.String(), "reload refused") {
			t.Fatalf("no diagnostic logged:\n%s", r.logs.String())
		}
	})
	t.Run("a new revision gives a fresh budget", func(t *testing.T) {
		writeConfig(t, r.path, up.URL, 2, 3)
		r.reload(t, "ok")
		if got := statusesOf(t, r, 4); got != "200 200 200 429" {
			t.Fatalf("after revision 2: %s", got)
		}
	})
	t.Run("admin endpoints answer, the public listener does not serve them", func(t *testing.T) {
		if code, body := r.admin(t, "/healthz"); code != 200 || body != "ok\n" {
			t.Fatalf("/healthz %d %q", code, body)
		}
		if code, body := r.admin(t, "/readyz"); code != 200 {
			t.Fatalf("/readyz %d %q", code, body)
		}
		if v := r.metricValue(t, `gateway_requests_total{outcome="denied",plan="none",route="orders.read",status="429"}`); v < 3 {
			t.Fatalf("denied counter %v", v)
		}
		if s := r.get(t, "/metrics").StatusCode; s != 404 {
			t.Fatalf("/metrics on the public listener: %d", s)
		}
	})
	t.Run("logs hold no client address", func(t *testing.T) {
		logs := r.logs.String()
		if strings.Contains(logs, `"pseudonym":"v1:`) == false {
			t.Fatalf("no pseudonym logged:\n%s", logs)
		}
		// The gateway's own listen addresses are logged at start-up, and
		// the target a request went to (configuration, on loopback here);
		// a client's address (127.0.0.1 with its ephemeral port) never is.
		for line := range strings.SplitSeq(logs, "\n") {
			if target := strings.Index(line, `"target":"`); target >= 0 {
				line = line[:target]
			}
			if strings.Contains(line, `"msg":"request"`) && strings.Contains(line, "127.0.0.1") {
				t.Fatalf("access log line holds an address: %s", line)
			}
		}
	})
}

func TestGracefulDrain(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "finished")
	}))
	defer up.Close()
	r := start(t, up.URL)

	type result struct {
		status int
		body   string
		err    error
	}
	inflight := make(chan result, 1)
	go func() {
		res, err := http.Get("http://" + r.servers.HTTPAddr().String() + "/orders")
		if err != nil {
			inflight <- result{err: err}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		inflight <- result{status: res.StatusCode, body: string(b)}
	}()
	<-arrived
	syscall.Kill(os.Getpid(), syscall.SIGTERM)

	// The listener closes while the request is still in flight.
	refused := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", r.servers.HTTPAddr().String(), time.Second)
		if err != nil {
			refused = true
			break
		}
		c.Close()
	}
	if !refused {
		t.Fatal("the listener still accepts after SIGTERM")
	}
	select {
	case <-r.exited:
		t.Fatalf("exited with %d before the in-flight request finished", r.code)
	default:
	}
	close(release)
	res := <-inflight
	if res.err != nil || res.status != 200 || res.body != "finished" {
		t.Fatalf("in-flight request: %+v", res)
	}
	select {
	case <-r.exited:
		if r.code != 0 {
			t.Fatalf("exit code %d", r.code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("gateway did not stop after draining")
	}
}

func TestRedisBackendThroughTheCLI(t *testing.T) {
	s := redistest.Start(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	r := startFile(t, writeGateway(t, anyPorts+pseudonymFromFile+fmt.Sprintf(`
limiter {
  backend = "redis"
  redis {
    addrs      = [%q]
    key_prefix = "cli:"
  }
}
policy "per-client" {
  algorithm = "token-bucket"
  capacity      = 2
  refill_tokens = 1
  refill_period = "1h"
}
route "orders.read" {
  path     = "/orders"
  upstream = %q
  policy   = "per-client"
}
route "stock.read" {
  path     = "/stock"
  upstream = %q
  policy   = "per-client"
}
`, s.Addr, up.URL, up.URL)))
	if got := statusesOf(t, r, 3); got != "200 200 429" {
		t.Fatalf("statuses %s", got)
	}
	if code, body := r.admin(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q", code, body)
	}
	s.Kill()
	if code, _ := r.admin(t, "/readyz"); code != 503 {
		t.Fatalf("/readyz with Redis down: %d", code)
	}
	// A denial the instance remembers stands without Redis; a subject it
	// knows nothing of cannot be decided.
	if got := statusesOf(t, r, 1); got != "429" {
		t.Fatalf("the denied subject with Redis down: %s", got)
	}
	if res := r.get(t, "/stock"); res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("a new subject with Redis down: %d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	s.Restart()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := r.admin(t, "/readyz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover")
		}
	}
	if v := r.metricValue(t, "gateway_redis_noscript_reloads_total"); v < 1 {
		t.Fatalf("noscript reloads %v after a restart", v)
	}
}

// A gateway started while its Redis is down serves what needs no decision,
// answers limited routes 503 with Retry-After, is not ready, and decides
// as soon as Redis is back, without a restart.
func TestTheGatewayStartsBeforeRedis(t *testing.T) {
	s := redistest.Start(t)
	s.Kill()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	path := writeRedisConfig(t, s.Addr, "", 100, up.URL, `
route "health" {
  path     = "/health"
  upstream = "`+up.URL+`"
}`)
	r := startFile(t, path)
	if res := r.get(t, "/orders"); res.StatusCode != 503 || res.Header.Get("Retry-After") == "" {
		t.Fatalf("limited route with Redis down: %d, Retry-After %q", res.StatusCode, res.Header.Get("Retry-After"))
	}
	if res := r.get(t, "/health"); res.StatusCode != 200 {
		t.Fatalf("unlimited route with Redis down: %d", res.StatusCode)
	}
	code, body := r.admin(t, "/readyz")
	var ready struct {
		Ready  bool   `json:"ready"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || code != 503 || ready.Ready || ready.Reason == "" {
		t.Fatalf("/readyz %d %s", code, body)
	}
	// Long enough down that the background connect loop tries only once
	// a second: readiness must not wait for its next try.
	time.Sleep(1500 * time.Millisecond)
	s.Restart()
	restarted := time.Now()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if r.get(t, "/orders").StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no decision 10s after Redis came back")
		}
	}
	t.Logf("first decision %v after Redis came back", time.Since(restarted).Round(time.Millisecond))
	// Ready no later than the first decision Redis answers (docs/redis.md).
	if code, body := r.admin(t, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %s right after a decision Redis answered", code, body)
	}
}

// With fallback { instances = 2 } an instance cut off from Redis admits its
// share of the limit, ceil(5 / 2) = 3, and says so in its log and metrics.
func TestTheFallbackServesThroughTheCLIWhileRedisIsDown(t *testing.T) {
	s := redistest.Start(t)
	s.Kill()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	path := writeRedisConfig(t, s.Addr, "fallback { instances = 2 }", 5, up.URL, "")
	r := startFile(t, path)
	if got := statusesOf(t, r, 5); got != "200 200 200 429 429" {
		t.Fatalf("statuses %s", got)
	}
	if v := r.metricValue(t, `gateway_limiter_fallback_total{decision="allowed",policy="p",route="orders.read"}`); v != 3 {
		t.Fatalf("fallback allowed %v, want 3", v)
	}
	if !strings.Contains(r.logs.String(), `"outcome":"fallback_denied"`) {
		t.Fatalf("no fallback_denied in the log:\n%s", r.logs.String())
	}
}

// writeRedisConfig writes a gateway file for the Redis at addr: limiter
// lines beside the redis block, a fixed-window policy "p" of limit a
// minute on route orders.read (/orders to upstream), and extra blocks.
func writeRedisConfig(t *testing.T, addr, limiterLines string, limit int, upstream, extra string) string {
	t.Helper()
	return writeGateway(t, anyPorts+pseudonymFromFile+fmt.Sprintf(`
limiter {
  backend = "redis"
  redis { addrs = [%q] }
  %s
}
policy "p" {
  algorithm = "fixed-window"
  limit     = %d
  window    = "1m"
}
route "orders.read" {
  path     = "/orders"
  upstream = %q
  policy   = "p"
}
%s
`, addr, limiterLines, limit, upstream, extra))
}

// stop drains the gateway as SIGTERM does and waits for it to exit.
func (r *running) stop(t *testing.T, within time.Duration) {
	t.Helper()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.exited:
	case <-time.After(within):
		t.Fatalf("the gateway did not exit within %v of SIGTERM", within)
	}
}

func TestConflictingFramingOnThePlainListener(t *testing.T) {
	var hits int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, err := io.ReadAll(r.Body); err == nil && string(b) == "abc" {
			hits++
		}
	}))
	defer up.Close()
	r := start(t, up.URL)
	c, err := net.Dial("tcp", r.servers.HTTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	// Two requests on one connection: a clean chunked one, then one with
	// both framings, which is refused and ends the connection.
	io.WriteString(c, "POST /orders HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"+
		"POST /orders HTTP/1.1\r\nHost: gw\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
	for i, want := range []int{200, 400} {
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		if res.StatusCode != want {
			t.Fatalf("response %d: %d, want %d", i, res.StatusCode, want)
		}
	}
	if hits != 1 {
		t.Fatalf("upstream got %d whole requests, want 1", hits)
	}
	if n := r.metricValue(t, `gateway_framing_refusals_total{reason="conflicting_framing"}`); n != 1 {
		t.Fatalf("gateway_framing_refusals_total{reason=\"conflicting_framing\"} is %v, want 1", n)
	}
	if logs := r.logs.String(); !strings.Contains(logs, `"reason":"conflicting_framing"`) || strings.Contains(logs, "127.0.0.1:"+fmt.Sprint(c.LocalAddr().(*net.TCPAddr).Port)) {
		t.Fatalf("no framing line in the log, or one with the client's address:\n%s", logs)
	}
}

func TestRedisOverTLSThroughTheCLI(t *testing.T) {
	s := redistest.StartTLS(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	write := func(tlsLines string) string {
		return writeGateway(t, anyPorts+pseudonymFromFile+fmt.Sprintf(`
limiter {
  backend = "redis"
  redis {
    addrs = [%q]
    %s
  }
}
policy "p" {
  algorithm = "fixed-window"
  limit     = 1
  window    = "1h"
}
route "orders.read" {
  path     = "/orders"
  upstream = %q
  policy   = "p"
}
`, s.Addr, tlsLines, up.URL))
	}
	t.Run("plain text to a TLS-only Redis serves nothing limited and is not ready", func(t *testing.T) {
		// The server hangs up on plain text: as far as the client can tell,
		// Redis is not there, so the gateway starts and says so.
		r := startFile(t, write(""))
		if got := statusesOf(t, r, 1); got != "503" {
			t.Fatalf("statuses %s", got)
		}
		if code, body := r.admin(t, "/readyz"); code != 503 || !strings.Contains(body, `"reason":"connecting to redis`) {
			t.Fatalf("/readyz %d %s", code, body)
		}
	})
	t.Run("tls with the server's CA decides", func(t *testing.T) {
		r := startFile(t, write(fmt.Sprintf("tls = true\n    tls_ca_file = %q", s.CAFile)))
		if got := statusesOf(t, r, 2); got != "200 429" {
			t.Fatalf("statuses %s", got)
		}
	})
}
