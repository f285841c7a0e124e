package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP receiver: it decodes each protobuf export
// request posted to /v1/traces and keeps its spans.
type otlpReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	service []string // service.name of each resource received
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("OTLP receiver got %s %s (%s)", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				t.Error(err)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(raw, &req); err != nil {
			t.Errorf("OTLP receiver: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			rc.service = append(rc.service, attrValue(rs.Resource.GetAttributes(), "service.name"))
			for _, ss := range rs.ScopeSpans {
				rc.spans = append(rc.spans, ss.Spans...)
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *otlpReceiver) received() ([]*tracepb.Span, []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*tracepb.Span(nil), rc.spans...), append([]string(nil), rc.service...)
}

func attrValue(attrs []*commonpb.KeyValue, key string) string {
	for _, a := range attrs {
		if a.Key == key {
			switch v := a.Value.Value.(type) {
			case *commonpb.AnyValue_StringValue:
				return v.StringValue
			case *commonpb.AnyValue_IntValue:
				return fmt.Sprint(v.IntValue)
			default:
				return fmt.Sprint(v)
			}
		}
	}
	return ""
}

// sendKeyed sends method /orders... with the API key telemetryConfig
// knows, and the header pairs given, and returns the status.
func (r *running) sendKeyed(t *testing.T, method, target string, header ...string) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+r.servers.HTTPAddr().String()+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", "test-only-key-4f1c")
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

func telemetryConfig(t *testing.T, endpoint, upstream, extra string) string {
	t.Helper()
	dir := t.TempDir()
	key := sha256.Sum256([]byte("test-only-key-4f1c"))
	if err := os.WriteFile(filepath.Join(dir, "keys.txt"), []byte(hex.EncodeToString(key[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gateway.hcl")
	src := fmt.Sprintf(`
listen {
  http             = "127.0.0.1:0"
  admin            = "127.0.0.1:0"
  shutdown_timeout = "2s"
}
subject {
  api_keys_file = "keys.txt"
}
telemetry {
  otlp_endpoint = %q
  %s
}
policy "per-key" {
  algorithm = "fixed-window"
  limit     = 100
  window    = "1h"
}
route "orders.read" {
  path     = "/orders"
  upstream = %q
  policy   = "per-key"
  subject  = ["api_key"]
}
`, endpoint, extra, upstream)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// One request's spans, as an OTLP/HTTP receiver gets them when the gateway
// drains: the server span, the limiter's and the upstream attempt's under
// it, the trace context at the upstream, and no identity anywhere.
func TestTracesReachAnOTLPReceiver(t *testing.T) {
	receiver := newOTLPReceiver(t)
	var (
		mu           sync.Mutex
		traceparents []string
	)
	// The upstream listens on another loopback address than the client's
	// connections come from, so that the client's address (127.0.0.1)
	// is nowhere it could be expected.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	up := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparents = append(traceparents, r.Header.Get("Traceparent")+" "+r.Header.Get("Tracestate"))
		mu.Unlock()
		io.WriteString(w, "ok")
	})}}
	up.Start()
	defer up.Close()
	r := startFile(t, telemetryConfig(t, receiver.URL, up.URL, `service_name = "edge-test"`))

	// A client's own trace context: an untrusted peer's is not followed.
	const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	const target = "/orders/42?customer=alice"
	if code := r.sendKeyed(t, "GET", target, "Host", "gw.test", "Traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01", "Tracestate", "client=chosen"); code != 200 {
		t.Fatalf("GET: %d", code)
	}
	if code := r.sendKeyed(t, "PURGE", target, "Host", "gw.test"); code != 200 {
		t.Fatalf("PURGE: %d", code)
	}
	r.stop(t, 10*time.Second)

	spans, services := receiver.received()
	for _, s := range services {
		if s != "edge-test" {
			t.Errorf("service.name %q, want edge-test", s)
		}
	}
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		byName[s.Name] = s
		// No identity: not the key, not the client's address, not the
		// pseudonym, not the path or the query.
		for _, a := range s.Attributes {
			v := attrValue([]*commonpb.KeyValue{a}, a.Key)
			for _, raw := range []string{"test-only-key-4f1c", "127.0.0.1", "v1:", "alice", "/orders/42"} {
				if strings.Contains(v, raw) {
					t.Errorf("span %q: attribute %s = %q holds %q", s.Name, a.Key, v, raw)
				}
			}
			if a.Key == "client.address" || a.Key == "network.peer.address" || a.Key == "url.query" {
				t.Errorf("span %q has %s", s.Name, a.Key)
			}
		}
	}
	if len(spans) != 6 {
		for _, s := range spans {
			t.Logf("span %q kind %v", s.Name, s.Kind)
		}
		t.Fatalf("%d spans, want 6 (server, limiter and upstream, for each of two requests)", len(spans))
	}

	// The GET's spans: each request has a limiter span.
	server, upstream := byName["GET orders.read"], byName["GET"]
	if server == nil || upstream == nil {
		t.Fatalf("spans %v, want GET orders.read and GET", keys(byName))
	}
	var limiter *tracepb.Span
	for _, s := range spans {
		if s.Name == "limiter" && bytes.Equal(s.TraceId, server.TraceId) {
			limiter = s
		}
	}
	if limiter == nil {
		t.Fatal("no limiter span in the GET's trace")
	}
	for name, want := range map[string]string{
		"http.request.method":       "GET",
		"http.route":                "/orders",
		"http.response.status_code": "200",
		"url.scheme":                "http",
		"server.address":            "gw.test",
		"network.protocol.version":  "1.1",
		"gateway.route":             "orders.read",
		"gateway.outcome":           "allowed",
		"gateway.limiter.outcome":   "allowed",
		"gateway.limiter.policy":    "per-key",
	} {
		if got := attrValue(server.Attributes, name); got != want {
			t.Errorf("server span %s = %q, want %q", name, got, want)
		}
	}
	if server.Kind != tracepb.Span_SPAN_KIND_SERVER || limiter.Kind != tracepb.Span_SPAN_KIND_INTERNAL || upstream.Kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("kinds: server %v, limiter %v, upstream %v", server.Kind, limiter.Kind, upstream.Kind)
	}
	if hex.EncodeToString(server.TraceId) == clientTrace || len(server.ParentSpanId) != 0 {
		t.Errorf("the server span joined the untrusted client's trace (trace %x, parent %x)", server.TraceId, server.ParentSpanId)
	}
	for _, child := range []*tracepb.Span{limiter, upstream} {
		if !bytes.Equal(child.TraceId, server.TraceId) || !bytes.Equal(child.ParentSpanId, server.SpanId) {
			t.Errorf("span %q: trace %x parent %x, want trace %x parent %x", child.Name, child.TraceId, child.ParentSpanId, server.TraceId, server.SpanId)
		}
	}
	for name, want := range map[string]string{"gateway.limiter.outcome": "allowed", "gateway.limiter.policy": "per-key"} {
		if got := attrValue(limiter.Attributes, name); got != want {
			t.Errorf("limiter span %s = %q, want %q", name, got, want)
		}
	}
	for name, want := range map[string]string{
		"http.request.method":       "GET",
		"http.response.status_code": "200",
		"server.address":            "127.0.0.2",
		"gateway.upstream.pool":     up.URL,
		"gateway.upstream.target":   up.URL,
	} {
		if got := attrValue(upstream.Attributes, name); got != want {
			t.Errorf("upstream span %s = %q, want %q", name, got, want)
		}
	}
	// The upstream got the upstream span's context, sampled, and not the
	// client's trace state.
	want := fmt.Sprintf("00-%x-%x-01 ", server.TraceId, upstream.SpanId)
	mu.Lock()
	defer mu.Unlock()
	if len(traceparents) != 2 || traceparents[0] != want {
		t.Errorf("traceparent and tracestate at the upstream %q, want %q first", traceparents, want)
	}
	// A method outside the standard ones is named _OTHER.
	if other := byName["_OTHER orders.read"]; other == nil || attrValue(other.Attributes, "http.request.method") != "_OTHER" {
		t.Errorf("no server span _OTHER orders.read with http.request.method _OTHER: %v", keys(byName))
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A receiver that is down, or hangs, costs requests nothing, and the
// drain still ends on time: the spans it could not send are dropped when
// the drain's time is up, not retried past it.
func TestTracesToAReceiverThatIsDownNeitherFailNorHoldRequests(t *testing.T) {
	refusing := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
		return "http://" + ln.Addr().String()
	}
	hanging := func(t *testing.T) string {
		release := make(chan struct{})
		rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
		}))
		t.Cleanup(rc.Close)
		t.Cleanup(func() { close(release) })
		return rc.URL
	}
	for name, receiver := range map[string]func(*testing.T) string{"refusing connections": refusing, "never answering": hanging} {
		t.Run(name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
			defer up.Close()
			r := startFile(t, telemetryConfig(t, receiver(t), up.URL, ""))
			for i := range 50 {
				if code := r.sendKeyed(t, "GET", "/orders"); code != 200 {
					t.Fatalf("request %d: %d", i, code)
				}
			}
			// shutdown_timeout is 2s; a post waits up to 10s for an
			// answer and a failed one is retried for 30s. The bound
			// leaves room for a loaded machine.
			start := time.Now()
			r.stop(t, 20*time.Second)
			if took := time.Since(start); took > 8*time.Second {
				t.Errorf("the gateway took %v to drain with its receiver down, past its 2s shutdown_timeout", took)
			}
			if !strings.Contains(r.logs.String(), `"msg":"telemetry: spans`) {
				t.Errorf("the spans not exported were not logged:\n%s", r.logs.String())
			}
		})
	}
}

// sample_ratio = 0 records no trace the gateway starts, but a trusted
// proxy's sampled trace context is followed (parent-based sampling): its
// trace is recorded, joined, and goes on upstream. A trace context the
// trusted proxy marks unsampled goes upstream unsampled.
func TestSamplingFollowsATrustedCallersDecision(t *testing.T) {
	receiver := newOTLPReceiver(t)
	var (
		mu           sync.Mutex
		traceparents []string
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		traceparents = append(traceparents, r.Header.Get("Traceparent"))
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	path := telemetryConfig(t, receiver.URL, up.URL, "sample_ratio = 0")
	src, _ := os.ReadFile(path)
	src = bytes.Replace(src, []byte(`subject {`), []byte("subject {\n  trusted_proxies = [\"127.0.0.0/8\"]"), 1)
	os.WriteFile(path, src, 0o644)
	r := startFile(t, path)

	const sampled, unsampled = "0af7651916cd43dd8448eb211c80319c", "5b8aa5a2d2c872e8321cf37308d69df2"
	for _, tp := range []string{"", "00-" + sampled + "-b7ad6b7169203331-01", "00-" + unsampled + "-b7ad6b7169203331-00"} {
		var header []string
		if tp != "" {
			header = []string{"Traceparent", tp}
		}
		if code := r.sendKeyed(t, "GET", "/orders", header...); code != 200 {
			t.Fatalf("status %d", code)
		}
	}
	r.stop(t, 10*time.Second)

	spans, _ := receiver.received()
	if len(spans) != 3 {
		t.Fatalf("%d spans exported, want the 3 of the trace the trusted proxy sampled", len(spans))
	}
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) != sampled {
			t.Errorf("span %q in trace %x, want %s", s.Name, s.TraceId, sampled)
		}
		if s.Name == "GET orders.read" && hex.EncodeToString(s.ParentSpanId) != "b7ad6b7169203331" {
			t.Errorf("the server span's parent is %x, want the trusted proxy's b7ad6b7169203331", s.ParentSpanId)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(traceparents) != 3 {
		t.Fatalf("upstream saw %d requests", len(traceparents))
	}
	for i, want := range []struct{ trace, flags string }{{"", "-00"}, {sampled, "-01"}, {unsampled, "-00"}} {
		tp := traceparents[i]
		if !strings.HasPrefix(tp, "00-"+want.trace) || !strings.HasSuffix(tp, want.flags) || strings.Contains(tp, "b7ad6b7169203331") {
			t.Errorf("request %d: traceparent %q upstream, want trace %q, a span of the gateway's and flags %s", i, tp, want.trace, want.flags)
		}
	}
}
