package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// HeaderRules change the headers of one direction of a route: Remove first,
// then Set, after the gateway has written its own headers. Names are
// unique within Set and never in both lists.
type HeaderRules struct {
	Set    []Header
	Remove []string
}

// Header is one header a rule sets: the value replaces every value of
// that name.
type Header struct {
	Name, Value string
}

// hopByHop are the headers that belong to one connection or frame the
// message: a rule that set one could split a request in two on its way
// upstream (Content-Length, Transfer-Encoding) or open a tunnel.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length", "Host",
}

// checkRuleHeader reports why a header rule may not set or remove name,
// or nil when it may. managed are the request headers whose meaning the
// subject resolver decides (subject.Options.ManagedHeaders): a rule that
// touched one could make the upstream believe a client, a principal or an
// API key the limiter did not. The gateway's forwarding headers, its
// RateLimit headers and Retry-After are never a rule's either, in either
// direction.
func checkRuleHeader(name string, managed []string) error {
	if !validHeaderName(name) {
		return fmt.Errorf("%q is not a header name (letters, digits and !#$%%&'*+-.^_`|~)", name)
	}
	// CGI, WSGI and Rack backends fold "_" into "-": X_Forwarded_For
	// reaches them as X-Forwarded-For, so a name is checked as they read
	// it (a client's such headers are dropped, but a rule's are sent).
	c := http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-"))
	as := c
	if strings.IndexByte(name, '_') >= 0 {
		as = fmt.Sprintf("%s (read as %s by backends that fold _ into -)", name, c)
	}
	switch {
	case c == "Forwarded" || strings.HasPrefix(c, "X-Forwarded-"):
		return fmt.Errorf("%s is a forwarding header the gateway writes itself", as)
	case strings.HasPrefix(c, "Ratelimit") || c == "Retry-After":
		return fmt.Errorf("%s is the gateway's rate-limit answer", as)
	case slices.Contains(hopByHop, c):
		if c == "Host" {
			return fmt.Errorf("%s is set with host_header", as)
		}
		return fmt.Errorf("%s belongs to the connection or frames the message", as)
	}
	for _, m := range managed {
		if http.CanonicalHeaderKey(m) == c {
			return fmt.Errorf("%s is read by the gateway to identify the client", as)
		}
	}
	return nil
}

// checkHeaderValue reports why v cannot be a header value a rule sets.
// Control characters (CR and LF above all) would let a value end the
// header and start another.
func checkHeaderValue(v string) error {
	if v == "" {
		return errors.New("the value is empty; to drop a header, list it in remove")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return fmt.Errorf("the value holds the control character %#02x", c)
		}
	}
	return nil
}

// validHeaderName reports whether s is a header field name (an RFC 9110
// token).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
			continue
		}
		if strings.IndexByte("!#$%&'*+-.^_`|~", c) < 0 {
			return false
		}
	}
	return true
}

// headerRules are HeaderRules compiled: canonical names, and each value
// already in the slice a header map holds, shared by every request (a
// header map's values are only ever replaced or appended to, and an
// append to a full slice copies it).
type headerRules struct {
	remove []string
	set    []compiledHeader
}

type compiledHeader struct {
	name   string
	values []string
}

// compileHeaderRules compiles rules that Route.Validate has passed.
func compileHeaderRules(hr HeaderRules) headerRules {
	var c headerRules
	for _, name := range hr.Remove {
		c.remove = append(c.remove, http.CanonicalHeaderKey(name))
	}
	for _, h := range hr.Set {
		c.set = append(c.set, compiledHeader{name: http.CanonicalHeaderKey(h.Name), values: []string{h.Value}[:1:1]})
	}
	return c
}

func (c *headerRules) empty() bool { return len(c.remove) == 0 && len(c.set) == 0 }

func (c *headerRules) apply(h http.Header) {
	for _, name := range c.remove {
		delete(h, name)
	}
	for _, s := range c.set {
		h[s.name] = s.values
	}
}
