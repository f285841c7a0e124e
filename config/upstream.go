package config

import (
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/edgegate/gateway/proxy"
)

// upstreams checks the upstream blocks and records their names for the
// routes that name them.
func (c *checker) upstreams(blocks []*upstreamBlock) []proxy.Pool {
	c.pools = map[string]bool{}
	var pools []proxy.Pool
	defined := map[string]hcl.Range{}
	for _, b := range blocks {
		if !isName(b.Name) {
			c.errorf(b.NameRange, "Invalid upstream name", "Upstream names are letters, digits, '.', '-' and '_'.")
			continue
		}
		if first, dup := defined[b.Name]; dup {
			c.errorf(b.NameRange, "Duplicate upstream", "An upstream named %q is already defined at %s.", b.Name, first)
			continue
		}
		defined[b.Name] = b.DefRange
		c.pools[b.Name] = true
		p := proxy.Pool{Name: b.Name}

		if !has(b.Body, "targets") {
			c.errorf(b.DefRange, "Missing required argument", "An upstream block needs targets, a list of URLs.")
			continue
		}
		seen := map[string]hcl.Range{}
		items := c.list(b.Targets, "targets")
		for _, it := range items {
			u, ok := targetURL(it.value)
			if !ok {
				c.errorf(it.rng, "Invalid target", "Each target must be an http:// or https:// URL with a host and no credentials, query or fragment, not %q.", it.value)
				continue
			}
			key := targetKey(u)
			if first, dup := seen[key]; dup {
				c.errorf(it.rng, "Duplicate target", "%s is already a target of this upstream, at %s.", it.value, first)
				continue
			}
			seen[key] = it.rng
			p.Targets = append(p.Targets, u)
		}
		if len(items) == 0 && !c.decodeFailed(b.Targets.Range()) {
			c.errorf(b.Targets.Range(), "No targets", "targets needs at least one URL.")
		}
		if b.Balance != nil {
			balance, ok := proxy.ParseBalance(*b.Balance)
			if !ok {
				c.errorf(valueRange(b.Body, "balance"), "Unknown balance", "balance must be \"round_robin\" or \"least_requests\", not %q.", *b.Balance)
			}
			p.Balance = balance
		}
		p.ConnectTimeout = c.duration(b.ConnectTimeout, b.Body, "connect_timeout", 0, time.Millisecond)
		p.ResponseTimeout = c.duration(b.ResponseTimeout, b.Body, "response_timeout", 0, time.Millisecond)
		p.FailTimeout = c.duration(b.FailTimeout, b.Body, "fail_timeout", 0, time.Millisecond)
		// The file's 0 means never, which proxy spells negative (its zero
		// is "the default").
		p.MaxFails = int(c.integer(b.MaxFails, b.Body, "max_fails", 0, 0))
		if b.MaxFails != nil && *b.MaxFails == 0 {
			p.MaxFails = -1
		}
		p.EjectOnTimeout = or(b.EjectOnTimeout, false)
		// As for max_fails, the file's 0 (no target ejected by failures)
		// is proxy's negative.
		p.MaxEjectedPercent = int(c.integer(b.MaxEjected, b.Body, "max_ejected_percent", 0, 0))
		switch {
		case p.MaxEjectedPercent > 100:
			c.errorf(valueRange(b.Body, "max_ejected_percent"), "Value too large", "max_ejected_percent is a share of the upstream's targets, at most 100.")
			p.MaxEjectedPercent = 0
		case b.MaxEjected != nil && *b.MaxEjected == 0:
			p.MaxEjectedPercent = -1
		}
		if hb := b.Health; hb != nil {
			h := &proxy.HealthCheck{Path: hb.Path}
			if n, err := proxy.NormalizePath(hb.Path); err != nil || n != hb.Path {
				c.errorf(valueRange(hb.Body, "path"), "Invalid health path", "path must be a normalized absolute path such as \"/healthz\", not %q.", hb.Path)
			}
			h.Interval = c.duration(hb.Interval, hb.Body, "interval", proxy.DefaultHealthInterval, time.Millisecond)
			h.Timeout = c.duration(hb.Timeout, hb.Body, "timeout", 0, time.Millisecond)
			if hb.Timeout != nil && h.Timeout > h.Interval {
				c.errorf(valueRange(hb.Body, "timeout"), "Health timeout above interval", "timeout is %s but checks run every %s; a check must end before the next.", h.Timeout, h.Interval)
			}
			p.Health = h
		}
		pools = append(pools, p)
	}
	return pools
}

// routeUpstream reads a route's upstream: a URL, or the name of an
// upstream block.
func (c *checker) routeUpstream(value string, rng hcl.Range) (*url.URL, string) {
	if !strings.Contains(value, "://") && isName(value) {
		if !c.pools[value] {
			c.errorf(rng, "Unknown upstream", "No upstream block is named %q, and it is no http:// or https:// URL.", value)
			return nil, ""
		}
		return nil, value
	}
	u, ok := targetURL(value)
	if !ok {
		c.errorf(rng, "Invalid upstream", "upstream must name an upstream block or be an http:// or https:// URL with a host and no credentials, query or fragment, not %q.", value)
		return nil, ""
	}
	return u, ""
}

func targetURL(s string) (*url.URL, bool) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, false
	}
	return u, true
}

// targetKey is a target as a server sees it, so that two spellings of one
// target are found out.
func targetKey(u *url.URL) string {
	return u.Scheme + "://" + strings.ToLower(u.Host) + strings.TrimSuffix(u.EscapedPath(), "/")
}
