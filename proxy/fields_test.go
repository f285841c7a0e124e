package proxy_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/limiter/limitertest"
	"github.com/edgegate/gateway/limiter/redistest"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// fieldSource is how a test sends a value in the field a source reads.
type fieldSource struct {
	source string // as the configuration writes it
	// send returns the path and headers that carry the values, each in
	// its own field line, cookie or parameter.
	send func(values ...string) (path string, headers []string)
}

var fieldSources = []fieldSource{
	{"header:X-Tenant", func(values ...string) (string, []string) {
		var h []string
		for _, v := range values {
			h = append(h, "x-tenant", v)
		}
		return "/", h
	}},
	{"cookie:session", func(values ...string) (string, []string) {
		var c []string
		for _, v := range values {
			c = append(c, "session="+v)
		}
		if len(c) == 0 {
			return "/", nil
		}
		return "/", []string{"Cookie", "other=1; " + strings.Join(c, "; ")}
	}},
	{"query:key", func(values ...string) (string, []string) {
		q := []string{"other=1"}
		for _, v := range values {
			q = append(q, "key="+v)
		}
		return "/?" + strings.Join(q, "&"), nil
	}},
}

// fieldBackends are the limiters the field sources are tested on.
func fieldBackends() map[string]func(t *testing.T) (proxy.Limiter, func(t *testing.T) string) {
	return map[string]func(t *testing.T) (proxy.Limiter, func(t *testing.T) string){
		"memory": func(t *testing.T) (proxy.Limiter, func(t *testing.T) string) { return nil, nil },
		"redis": func(t *testing.T) (proxy.Limiter, func(t *testing.T) string) {
			s := redistest.Start(t)
			return redistest.NewLimiter(t, limiter.RedisOptions{Addrs: []string{s.Addr}}), func(t *testing.T) string {
				return redisDump(t, s)
			}
		},
	}
}

// redisDump is every key of s and what it holds, as text.
func redisDump(t *testing.T, s *redistest.Server) string {
	admin := s.Client(t)
	ctx := context.Background()
	keys, _ := admin.Keys(ctx, "*").Result()
	var dump strings.Builder
	for _, k := range keys {
		dump.WriteString(k + "\n")
		switch admin.Type(ctx, k).Val() {
		case "hash":
			for f, v := range admin.HGetAll(ctx, k).Val() {
				dump.WriteString(f + "=" + v + "\n")
			}
		case "string":
			dump.WriteString(admin.Get(ctx, k).Val() + "\n")
		}
	}
	return dump.String()
}

func problemType(t *testing.T, res *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(res.Body)
	_, typ, _ := strings.Cut(string(b), `"type":"`)
	typ, _, _ = strings.Cut(typ, `"`)
	return typ
}

// Each field source gives every value a budget of its own, on memory and
// on Redis; a request without the field, or with it empty, falls through
// to client_ip; a value sent twice or over 256 bytes is refused before
// anything is counted; and no backend holds the raw value.
func TestFieldSourcesOnEachBackend(t *testing.T) {
	for backendName, backend := range fieldBackends() {
		for _, fs := range fieldSources {
			t.Run(backendName+"/"+fs.source, func(t *testing.T) {
				lim, dump := backend(t)
				src, err := subject.ParseSource(fs.source)
				if err != nil {
					t.Fatal(err)
				}
				up := newUpstream(t)
				p := policy(limitertest.FixedWindow(2, time.Minute), "p")
				if lim != nil {
					p = redisPolicy(limitertest.FixedWindow(2, time.Minute), "p")
				}
				rt := route("r", "/", up, t, p)
				rt.Subject = []subject.Source{src, {Kind: subject.ClientIP}}
				g := newGateway(t, setup{routes: []proxy.Route{rt}, limiter: lim})
				get := func(values ...string) *http.Response {
					path, headers := fs.send(values...)
					return g.get(t, path, headers...)
				}
				statusesOf := func(n int, values ...string) []int {
					var got []int
					for range n {
						got = append(got, get(values...).StatusCode)
					}
					return got
				}
				wantStatuses(t, statusesOf(3, "tenant-acme"), 200, 200, 429)
				wantStatuses(t, statusesOf(3, "tenant-globex"), 200, 200, 429)
				// Absent and empty fall through to the address: one more
				// budget, shared by both.
				wantStatuses(t, statusesOf(1), 200)
				wantStatuses(t, statusesOf(2, ""), 200, 429)
				for name, values := range map[string][]string{
					"repeated": {"tenant-new", "tenant-new"},
					"huge":     {strings.Repeat("h", subject.MaxFieldValueBytes+1)},
				} {
					res := get(values...)
					want := map[string]string{"repeated": "urn:edge-gateway:problem:ambiguous-credential", "huge": "urn:edge-gateway:problem:bad-subject"}[name]
					if res.StatusCode != 400 || problemType(t, res) != want {
						t.Errorf("%s: %d %s, want 400 %s", name, res.StatusCode, problemType(t, res), want)
					}
				}
				// A value of the longest length is still one.
				wantStatuses(t, statusesOf(3, strings.Repeat("l", subject.MaxFieldValueBytes)), 200, 200, 429)
				if up.count() != 8 {
					t.Errorf("upstream saw %d requests, want 8", up.count())
				}
				if dump != nil {
					if d := dump(t); strings.Contains(d, "tenant-") || strings.Contains(d, "hhhh") || strings.Contains(d, "llll") {
						t.Errorf("Redis holds a raw value:\n%s", d)
					}
				}
				if logs := g.logs.String(); strings.Contains(logs, "tenant-") {
					t.Errorf("the log holds a raw value:\n%s", logs)
				}
			})
		}
	}
}

// A query parameter is decoded once: %2541 is the value "%41", a budget
// apart from "A" ("%41" decoded once); a bad escape is refused.
func TestQuerySourceDecodesOnce(t *testing.T) {
	up := newUpstream(t)
	rt := route("r", "/", up, t, policy(limitertest.FixedWindow(1, time.Minute), "p"))
	rt.Subject = []subject.Source{{Kind: subject.QueryParam, Name: "key"}}
	g := newGateway(t, setup{routes: []proxy.Route{rt}})
	wantStatuses(t, statuses(t, g, "/?key=%41", 2), 200, 429)
	wantStatuses(t, statuses(t, g, "/?key=A", 1), 429)
	wantStatuses(t, statuses(t, g, "/?key=%2541", 2), 200, 429)
	wantStatuses(t, statuses(t, g, "/?key=%252541", 1), 200)
	wantStatuses(t, statuses(t, g, "/?key=+A", 1), 429) // '+' is a space, trimmed
	res := g.raw(t, "GET /?key=%zz HTTP/1.1")
	if res.StatusCode != 400 || problemType(t, res) != "urn:edge-gateway:problem:bad-subject" {
		t.Fatalf("bad escape: %d %s", res.StatusCode, problemType(t, res))
	}
	// An unidentified request: no other source.
	if res := g.get(t, "/?other=1"); res.StatusCode != 401 {
		t.Fatalf("no key: %d", res.StatusCode)
	}
}
