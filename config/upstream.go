package config

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/edgegate/gateway/proxy"
)

// upstreams checks the upstream blocks and records their names for the
// routes that name them.
func (c *checker) upstreams(blocks []*upstreamBlock) []proxy.Pool {
	c.pools = map[string]bool{}
	var pools []proxy.Pool
	// The ranges of the pools' fields as a list (proxy.ValidatePools).
	listElements := map[string]hcl.Range{}
	for _, b := range blocks {
		if !isName(b.Name) {
			c.errorf(b.NameRange, "Invalid upstream name", "Upstream names are letters, digits, '.', '-' and '_'.")
			continue
		}
		c.pools[b.Name] = true
		p := proxy.Pool{Name: b.Name}
		field := fmt.Sprintf("upstreams[%d]", len(pools))
		listElements[field], listElements[field+".name"] = b.DefRange, b.NameRange

		if !has(b.Body, "targets") {
			c.errorf(b.DefRange, "Missing required argument", "An upstream block needs targets, a list of URLs.")
			pools = append(pools, p)
			continue
		}
		elements := map[string]hcl.Range{}
		items := c.list(b.Targets, "targets")
		for _, it := range items {
			u, err := proxy.ParseTarget(it.value)
			if err != nil {
				c.errorf(it.rng, "Invalid target", "Each target must be an http:// or https:// URL with a host and no credentials, query or fragment, not %q.", it.value)
				continue
			}
			elements[fmt.Sprintf("targets[%d]", len(p.Targets))] = it.rng
			p.Targets = append(p.Targets, u)
		}
		if b.Balance != nil {
			balance, ok := proxy.ParseBalance(*b.Balance)
			if !ok {
				c.errorf(valueRange(b.Body, "balance"), "Unknown balance", "balance must be \"round_robin\" or \"least_requests\", not %q.", *b.Balance)
			}
			p.Balance = balance
		}
		// What each duration may be is proxy.Pool.Validate's. Its zero is
		// "the default"; a 0 the file writes is below the minimum, and is
		// passed on as negative for proxy to refuse.
		p.ConnectTimeout = c.optionDuration(b.ConnectTimeout, b.Body, "connect_timeout")
		p.ResponseTimeout = c.optionDuration(b.ResponseTimeout, b.Body, "response_timeout")
		p.FailTimeout = c.optionDuration(b.FailTimeout, b.Body, "fail_timeout")
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
		if b.MaxEjected != nil && *b.MaxEjected == 0 {
			p.MaxEjectedPercent = -1
		}
		bodies, defs := map[string]hcl.Body{"": b.Body}, map[string]hcl.Range{}
		if hb := b.Health; hb != nil {
			bodies["health"], defs["health"] = hb.Body, hb.DefRange
			p.Health = &proxy.HealthCheck{
				Path:     hb.Path,
				Interval: c.optionDuration(hb.Interval, hb.Body, "interval"),
				Timeout:  c.optionDuration(hb.Timeout, hb.Body, "timeout"),
			}
		}
		// The rest of an upstream's rules are proxy.Pool.Validate's. When
		// the file lists targets, none of which is a URL, each is
		// reported above: that none is left is not said again.
		var skip []string
		if len(items) > 0 {
			skip = append(skip, "targets")
		}
		c.fields(p.Validate(), "Invalid upstream", b.DefRange, finderOf(bodies, defs, elements), skip...)
		pools = append(pools, p)
	}
	// That no name is given twice is proxy.ValidatePools's to say.
	c.fields(proxy.ValidatePools(pools), "Invalid upstream", hcl.Range{}, finderOf(nil, nil, listElements))
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
	u, err := proxy.ParseTarget(value)
	if err != nil {
		c.errorf(rng, "Invalid upstream", "upstream must name an upstream block or be an http:// or https:// URL with a host and no credentials, query or fragment, not %q.", value)
		return nil, ""
	}
	return u, ""
}
