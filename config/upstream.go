package config

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/edgegate/gateway/overload"
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
		for _, it := range c.list(b.Targets, "targets") {
			elements[fmt.Sprintf("targets[%d]", len(p.Targets))] = it.rng
			p.Targets = append(p.Targets, it.value)
		}
		if b.Balance != nil {
			balance, err := proxy.ParseBalance(*b.Balance)
			if err != nil {
				c.refusedAt(valueRange(b.Body, "balance"), err)
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
		if ob := b.Overload; ob != nil {
			bodies["overload"], defs["overload"] = ob.Body, ob.DefRange
			// As for max_fails, the file's queue = 0 (none) is the
			// options' negative, and their zero the default.
			p.Overload = &overload.Options{
				Adaptive:     or(ob.Adaptive, false),
				MinLimit:     int(c.integer(ob.MinLimit, ob.Body, "min_limit", 0, 1)),
				MaxInFlight:  int(c.integer(&ob.MaxInFlight, ob.Body, "max_in_flight", 0, 1)),
				Queue:        optionInt(ob.Queue),
				QueueTimeout: c.optionDuration(ob.QueueTimeout, ob.Body, "queue_timeout"),
			}
			if ob.Queue != nil && *ob.Queue < 0 {
				c.errorf(valueRange(ob.Body, "queue"), "Value too small", "queue must be at least 0 (0: no queue).")
			}
		}
		// The rest of an upstream's rules, what a target may be among
		// them, are proxy.Pool.Validate's.
		c.fields(p.Validate(), "Invalid upstream", b.DefRange, finderOf(bodies, defs, elements))
		pools = append(pools, p)
	}
	// That no name is given twice is proxy.ValidatePools's to say.
	c.fields(proxy.ValidatePools(pools), "Invalid upstream", hcl.Range{}, finderOf(nil, nil, listElements))
	return pools
}

// routeUpstream reads a route's upstream: the name of an upstream block,
// or else a URL, which is proxy.Route.Validate's to check.
func (c *checker) routeUpstream(value string, rng hcl.Range) (upstream, pool string) {
	if !strings.Contains(value, "://") && isName(value) {
		if !c.pools[value] {
			c.errorf(rng, "Unknown upstream", "No upstream block is named %q, and it is no http:// or https:// URL.", value)
			return "", ""
		}
		return "", value
	}
	return value, ""
}
