package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/overload"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

var defaultSources = []subject.Kind{subject.Principal, subject.APIKey, subject.ClientIP}

// sourcesKnown says which subject sources the rest of the file makes
// usable.
type sourcesKnown struct {
	keys, principal, jwt, clientCAs, https bool
}

func knownSources(so *subject.Options, https bool) sourcesKnown {
	return sourcesKnown{keys: so.KnownKeys != nil, principal: so.PrincipalHeader != "" && len(so.TrustedProxies) > 0,
		jwt: so.JWT != nil, clientCAs: so.ClientCAs != nil, https: https}
}

// routes checks the route blocks against the policies and the subject
// options; maxBody is the listen block's default body cap, https whether
// the file has an HTTPS listener.
func (c *checker) routes(blocks []*routeBlock, policies map[string]*limiter.Policy, so *subject.Options, maxBody int64, https bool) []proxy.Route {
	known := knownSources(so, https)
	var routes []proxy.Route
	// The ranges of the routes' fields as a list (proxy.ValidateRoutes).
	listElements := map[string]hcl.Range{}
	for _, b := range blocks {
		if !isName(b.OperationID) {
			c.errorf(b.OperationIDRange, "Invalid operation ID", "Route labels are letters, digits, '.', '-' and '_'.")
			continue
		}
		field := fmt.Sprintf("routes[%d]", len(routes))
		listElements[field], listElements[field+".operation_id"] = b.DefRange, b.OperationIDRange
		routes = append(routes, c.route(b, policies, so, maxBody, known))
	}
	// That no label is taken twice, and that no two routes match the same
	// requests, is proxy.ValidateRoutes's to say.
	c.fields(proxy.ValidateRoutes(routes), "Invalid route", hcl.Range{}, finderOf(nil, nil, listElements))
	return routes
}

// route reads one route block, has proxy.Route.Validate check it, and
// returns it in the forms the proxy compiles. What the route's rules say
// of the path, the upstream URL, the cost, the policies and plans, the
// rewrite, the host header, the header rules, the upgrades and the
// ignored extensions is Validate's; each element is read with its range,
// by the field Validate names it.
func (c *checker) route(b *routeBlock, policies map[string]*limiter.Policy, so *subject.Options, maxBody int64, known sourcesKnown) proxy.Route {
	r := proxy.Route{OperationID: b.OperationID, Host: strings.ToLower(strings.TrimSuffix(or(b.Host, ""), "."))}
	r.Path = b.Path
	if has(b.Body, "methods") {
		for _, m := range c.list(b.Methods, "methods") {
			if !isToken(m.value) {
				c.errorf(m.rng, "Invalid method", "%q is not an HTTP method.", m.value)
				continue
			}
			r.Methods = append(r.Methods, strings.ToUpper(m.value))
		}
	}
	if valueRange(b.Body, "upstream") != (hcl.Range{}) {
		r.Upstream, r.Pool = c.routeUpstream(b.Upstream, valueRange(b.Body, "upstream"))
	}
	r.Subject = c.routeSubject(b, known)
	r.ClientCertIdentity, r.ClientCertHeader = c.clientCertRoute(b, r.Subject, known.clientCAs)
	elements := map[string]hcl.Range{}
	c.routeForms(b, &r, elements)
	r.Cost = c.integer(b.Cost, b.Body, "cost", 1, 1)
	r.MaxBodyBytes = c.integer(b.MaxBodyBytes, b.Body, "max_body_bytes", maxBody, 0)
	c.routeLimits(b, &r, policies, so, elements)
	c.routePriorities(b, &r, so, elements)
	// A path or upstream left out is the decoder's to report.
	var absent []string
	for _, name := range []string{"path", "upstream"} {
		if !has(b.Body, name) {
			absent = append(absent, name)
		}
	}
	c.fields(r.Validate(so.ManagedHeaders()), "Invalid route", b.DefRange, finderOf(map[string]hcl.Body{"": b.Body}, nil, elements), absent...)
	// The file's forms, as the proxy compiles them; a path it cannot
	// take is none, compared with no other route.
	r.Path, _ = proxy.RoutePath(r.Path)
	if r.Rewrite {
		r.RewritePrefix, _ = proxy.NormalizeRewritePrefix(r.RewritePrefix)
	}
	for i, u := range r.Upgrades {
		r.Upgrades[i] = strings.ToLower(u)
	}
	return r
}

// routeSubject reads a route's subject sources: the default ones when it
// names none, and each it names only where the file makes it usable.
func (c *checker) routeSubject(b *routeBlock, known sourcesKnown) []subject.Kind {
	if !has(b.Body, "subject") {
		return defaultSources
	}
	var sources []subject.Kind
	items := c.list(b.Subject, "subject")
	for _, it := range items {
		k, err := subject.ParseKind(it.value)
		if err != nil {
			c.refusedAt(it.rng, err)
			continue
		}
		if slices.Contains(sources, k) {
			c.errorf(it.rng, "Repeated subject source", "%s is already in the list.", it.value)
			continue
		}
		c.sourceUsable(k, it.rng, known)
		sources = append(sources, k)
	}
	if len(items) == 0 {
		c.errorf(b.Subject.Range(), "No subject source", "subject needs at least one source.")
	}
	return sources
}

// sourceUsable reports at rng a subject source the rest of the file does
// not make usable.
func (c *checker) sourceUsable(k subject.Kind, rng hcl.Range, known sourcesKnown) {
	switch {
	case k == subject.APIKey && !known.keys:
		c.errorf(rng, "api_key needs known keys", "The api_key source counts only known keys; set subject.api_keys_file.")
	case k == subject.Principal && !known.principal:
		c.errorf(rng, "principal needs a trusted proxy", "The principal source needs subject.principal_header and subject.trusted_proxies.")
	case k == subject.JWT && !known.jwt:
		c.errorf(rng, "jwt needs a jwt block", "The jwt source verifies tokens against subject.jwt; add the block with a key set, issuer, audience and algorithms.")
	case k == subject.ClientCert && !known.clientCAs:
		c.errorf(rng, "client_cert needs client_ca_file", "The client_cert source believes certificates that chain to tls.client_ca_file; set it.")
	case (k == subject.JA4 || k == subject.JA4ClientIP) && !known.https:
		c.errorf(rng, k.String()+" needs listen.https", "The ja4 fingerprint is read from the TLS ClientHello; the gateway terminates TLS only on listen.https (and http3).")
	}
}

// routeForms reads what a route changes of a request and its response
// (rewrite, host header, header rules) and what it matches beyond the
// path (upgrades, case, ignored extensions).
func (c *checker) routeForms(b *routeBlock, r *proxy.Route, elements map[string]hcl.Range) {
	if b.RewritePrefix != nil && !c.decodeFailed(valueRange(b.Body, "rewrite_prefix")) {
		r.Rewrite, r.RewritePrefix = true, *b.RewritePrefix
	}
	if b.HostHeader != nil && !c.decodeFailed(valueRange(b.Body, "host_header")) {
		r.HostHeader = *b.HostHeader
	}
	if b.RequestHeaders != nil {
		r.RequestHeaders = c.headerRules(b.RequestHeaders, "request_headers", elements)
	}
	if b.ResponseHeaders != nil {
		r.ResponseHeaders = c.headerRules(b.ResponseHeaders, "response_headers", elements)
	}
	if has(b.Body, "upgrade") {
		for _, it := range c.list(b.Upgrade, "upgrade") {
			elements[fmt.Sprintf("upgrade[%d]", len(r.Upgrades))] = it.rng
			r.Upgrades = append(r.Upgrades, it.value)
		}
	}
	if b.CaseInsensitive != nil {
		r.CaseInsensitive = *b.CaseInsensitive
	}
	if has(b.Body, "ignore_extensions") {
		for _, it := range c.list(b.IgnoreExtensions, "ignore_extensions") {
			elements[fmt.Sprintf("ignore_extensions[%d]", len(r.IgnoreExtensions))] = it.rng
			r.IgnoreExtensions = append(r.IgnoreExtensions, it.value)
		}
	}
}

// routeLimits reads a route's policies (policy = "x" is policies = ["x"])
// and its plans' policies.
func (c *checker) routeLimits(b *routeBlock, r *proxy.Route, policies map[string]*limiter.Policy, so *subject.Options, elements map[string]hcl.Range) {
	hasPolicies := has(b.Body, "policies")
	if b.Policy != nil && hasPolicies {
		c.errorf(nameRange(b.Body, "policy"), "Both policy and policies", "A route takes policy = \"x\" for one policy or policies = [...] for several, not both.")
	}
	usePolicy := c.policyNamed(policies)
	switch {
	case b.Policy != nil && !hasPolicies:
		// policy = "x" is policies = ["x"].
		r.Policies, _ = c.policyList([]listItem{{*b.Policy, valueRange(b.Body, "policy")}}, "policies", elements, usePolicy)
	case hasPolicies && b.Policy == nil:
		items := c.list(b.Policies, "policies")
		if len(items) == 0 {
			c.errorf(b.Policies.Range(), "No policy in policies", "policies needs at least one policy name; leave it out for no limit.")
		}
		r.Policies, _ = c.policyList(items, "policies", elements, usePolicy)
	case b.Policy == nil && !hasPolicies && b.Cost != nil && !has(b.Body, "plans"):
		c.errorf(nameRange(b.Body, "cost"), "Cost without a policy", "cost means nothing on a route without a policy.")
	}
	if has(b.Body, "plans") {
		if b.Policy == nil && !hasPolicies {
			c.errorf(attrRange(b.Body, "plans"), "Plans without a default policy", "Subjects without a plan, or on a plan not listed, would go unlimited; give the route a policy or policies for them.")
		}
		r.Plans = c.plans(b.Plans, elements, usePolicy)
		for name := range r.Plans {
			if !slices.Contains(so.Plans, name) {
				so.Plans = append(so.Plans, name)
			}
		}
	}
}

// routePriorities reads a route's priority and its plans' priorities.
func (c *checker) routePriorities(b *routeBlock, r *proxy.Route, so *subject.Options, elements map[string]hcl.Range) {
	if b.Priority != nil {
		r.Priority = c.priority(*b.Priority, valueRange(b.Body, "priority"))
	}
	if has(b.Body, "plan_priority") {
		r.PlanPriority = map[string]overload.Priority{}
		for _, it := range c.stringMap(b.PlanPriority, "plan_priority") {
			if !isName(it.key) {
				c.errorf(it.keyRange, "Invalid plan name", "Plan names are letters, digits, '.', '-' and '_', not %q.", it.key)
				continue
			}
			elements["plan_priority."+it.key] = it.valueRange
			r.PlanPriority[it.key] = c.priority(it.value, it.valueRange)
			if !slices.Contains(so.Plans, it.key) {
				so.Plans = append(so.Plans, it.key)
			}
		}
	}
}

// headerRules reads one request_headers or response_headers block, and
// records the range of each name and value under the field
// proxy.Route.Validate names it by.
func (c *checker) headerRules(b *headerRulesBlock, block string, elements map[string]hcl.Range) proxy.HeaderRules {
	var hr proxy.HeaderRules
	if has(b.Body, "set") {
		for _, it := range c.stringMap(b.Set, block+".set") {
			field := fmt.Sprintf("%s.set[%d]", block, len(hr.Set))
			elements[field], elements[field+".value"] = it.keyRange, it.valueRange
			hr.Set = append(hr.Set, proxy.Header{Name: it.key, Value: it.value})
		}
	}
	if has(b.Body, "remove") {
		for _, it := range c.list(b.Remove, block+".remove") {
			elements[fmt.Sprintf("%s.remove[%d]", block, len(hr.Remove))] = it.rng
			hr.Remove = append(hr.Remove, it.value)
		}
	}
	return hr
}

// plans reads a route's plans: a map from plan names to a policy name or
// a list of them, recording the range of each plan's list ("plans.NAME")
// and of each policy in it ("plans.NAME[i]") in elements.
func (c *checker) plans(expr hcl.Expression, elements map[string]hcl.Range, usePolicy func(string, hcl.Range) *limiter.Policy) map[string][]*limiter.Policy {
	pairs, diags := hcl.ExprMap(expr)
	if diags.HasErrors() {
		c.errorf(expr.Range(), "Wrong type", "plans must be a map written out, such as { gold = \"gold-orders\", partner = [\"per-second\", \"partner-day\"] }.")
		return nil
	}
	out := map[string][]*limiter.Policy{}
	seen := map[string]hcl.Range{}
	for _, p := range pairs {
		k, kdiags := p.Key.Value(c.ctx)
		c.diags = append(c.diags, kdiags...)
		if kdiags.HasErrors() {
			continue
		}
		k, err := convert.Convert(k, cty.String)
		if err != nil || k.IsNull() {
			c.errorf(p.Key.Range(), "Wrong type", "each plan name must be a string.")
			continue
		}
		name := k.AsString()
		if !isName(name) {
			c.errorf(p.Key.Range(), "Invalid plan name", "Plan names are letters, digits, '.', '-' and '_', not %q.", name)
			continue
		}
		if first, dup := seen[name]; dup {
			c.errorf(p.Key.Range(), "Duplicate plan", "Plan %q is already given at %s.", name, first)
			continue
		}
		seen[name] = p.Key.Range()
		var items []listItem
		if _, ldiags := hcl.ExprList(p.Value); !ldiags.HasErrors() {
			items = c.list(p.Value, "plans."+name)
		} else {
			v, ok := c.value(p.Value, "plans."+name, cty.String)
			if !ok {
				continue
			}
			items = []listItem{{v.AsString(), p.Value.Range()}}
		}
		elements["plans."+name] = p.Value.Range()
		if ps, whole := c.policyList(items, "plans."+name, elements, usePolicy); whole {
			out[name] = ps
		}
	}
	return out
}

// policyNamed looks a policy up by name, reporting at rng a name no
// policy block has.
func (c *checker) policyNamed(policies map[string]*limiter.Policy) func(name string, rng hcl.Range) *limiter.Policy {
	return func(name string, rng hcl.Range) *limiter.Policy {
		p, ok := policies[name]
		if !ok {
			c.errorf(rng, "Unknown policy", "No policy block is named %q.", name)
		}
		return p
	}
}

// policyList reads the policies a list names, recording the range of
// each under its field ("policies[i]", "plans.NAME[i]") in elements; a
// name listed again is looked up once. whole reports that every name
// became a policy.
func (c *checker) policyList(items []listItem, field string, elements map[string]hcl.Range, usePolicy func(string, hcl.Range) *limiter.Policy) (ps []*limiter.Policy, whole bool) {
	found := map[string]*limiter.Policy{}
	for _, it := range items {
		p, again := found[it.value]
		if !again {
			p = usePolicy(it.value, it.rng)
			found[it.value] = p
		}
		if p != nil {
			elements[fmt.Sprintf("%s[%d]", field, len(ps))] = it.rng
			ps = append(ps, p)
		}
	}
	return ps, len(ps) == len(items)
}

// priority reads a priority name; an unknown one is reported at rng and
// read as the default.
func (c *checker) priority(name string, rng hcl.Range) overload.Priority {
	p, err := overload.ParsePriority(name)
	if err != nil {
		c.refusedAt(rng, err)
	}
	return p
}
