package proxy

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/overload"
)

// Validate reports every problem of r's path, upstream URL, cost,
// policies and plans, rewrite, host header, client_cert_header, header
// rules, upgrades and ignored extensions, each a *option.Error, joined. managed are the request headers the
// resolver reads (subject.Options.ManagedHeaders), which no header rule
// may touch.
func (r *Route) Validate(managed []string) error {
	var errs []error
	problem := func(field, summary, detail string, args ...any) {
		errs = append(errs, &option.Error{Field: field, Summary: summary, Detail: fmt.Sprintf(detail, args...)})
	}
	if _, err := RoutePath(r.Path); err != nil {
		problem("path", "Invalid path", "path must start with / and hold no encoded slash, dot segment parameters, control characters, segment ending in a dot or a space, or dot encoded twice or in an overlong form.")
	}
	if r.Pool == "" {
		if _, ok := parseTarget(r.Upstream); !ok {
			problem("upstream", "Invalid upstream", "upstream must name an upstream block or be an http:// or https:// URL with a host and no credentials, query or fragment, not %q.", r.Upstream)
		}
	}
	errs = append(errs, validatePolicies("policies", "route", r.Policies)...)
	// The first policy, of the route's then its plans', that allows less
	// than the route's cost.
	lists := [][]*limiter.Policy{r.Policies}
	for _, plan := range slices.Sorted(maps.Keys(r.Plans)) {
		lists = append(lists, r.Plans[plan])
	}
	for _, ps := range lists {
		if i := slices.IndexFunc(ps, func(p *limiter.Policy) bool { return p != nil && r.Cost > p.MaxCost }); i >= 0 {
			problem("cost", "Cost above max_cost", "cost is %d but policy %q allows at most %d.", r.Cost, ps[i].Name, ps[i].MaxCost)
			break
		}
	}
	for _, plan := range slices.Sorted(maps.Keys(r.Plans)) {
		field := "plans." + plan
		if len(r.Plans[plan]) == 0 {
			problem(field, "Plan without a policy", "Plan %q names no policy; give it one, or leave it out so that its subjects get the route's policy.", plan)
			continue
		}
		errs = append(errs, validatePolicies(field, "plan", r.Plans[plan])...)
	}
	if r.Rewrite {
		if _, err := NormalizeRewritePrefix(r.RewritePrefix); err != nil {
			problem("rewrite_prefix", "Invalid rewrite_prefix", "rewrite_prefix %s, not %q.", err, r.RewritePrefix)
		}
	}
	if r.HostHeader != "" && !validHostHeader(r.HostHeader) {
		problem("host_header", "Invalid host_header", "host_header must be a host name or address with an optional port, such as \"orders.internal\" or \"10.0.0.7:8080\", not %q.", r.HostHeader)
	}
	if h := r.ClientCertHeader; h != "" {
		if err := checkRuleHeader(h, managed); err != nil || strings.IndexByte(h, '_') >= 0 {
			problem("client_cert_header", "Invalid client_cert_header", "client_cert_header must be a header name of letters, digits and '-' that the gateway does not manage otherwise, not %q.", h)
		}
		// The gateway writes it: no rule may.
		c := http.CanonicalHeaderKey(h)
		for field, name := range r.RequestHeaders.names("request_headers") {
			if http.CanonicalHeaderKey(strings.ReplaceAll(name, "_", "-")) == c {
				problem(field, "Header the gateway manages", "%s is the route's client_cert_header, which the gateway writes; request_headers cannot set or remove it.", name)
			}
		}
	}
	errs = append(errs, r.RequestHeaders.validate("request_headers", managed)...)
	errs = append(errs, r.ResponseHeaders.validate("response_headers", managed)...)
	if !r.Priority.Valid() {
		problem("priority", "Unknown priority", "priority %d is none of sheddable, default and critical.", r.Priority)
	}
	if len(r.PlanPriority) > 0 && len(r.Policies) == 0 && len(r.Plans) == 0 {
		problem("plan_priority", "plan_priority without a policy", "A subject's plan is known only on a route with a policy; give the route one, or leave plan_priority out.")
	}
	for _, plan := range slices.Sorted(maps.Keys(r.PlanPriority)) {
		switch p := r.PlanPriority[plan]; {
		case !p.Valid():
			problem("plan_priority."+plan, "Unknown priority", "priority %d is none of sheddable, default and critical.", p)
		case p > r.Priority:
			problem("plan_priority."+plan, "Plan priority above the route's", "Plan %q is given %s, above the route's %s; a plan may lower a route's priority, never raise it.", plan, p, r.Priority)
		}
	}
	var upgrades []string
	for i, u := range r.Upgrades {
		field, name := fmt.Sprintf("upgrade[%d]", i), strings.ToLower(u)
		switch {
		case name == "h2c":
			problem(field, "h2c is never forwarded", "An h2c connection past the gateway would carry requests it never sees; list upgrades such as \"websocket\".")
		case !validHeaderName(name):
			problem(field, "Invalid upgrade", "%q is not a protocol name such as \"websocket\".", u)
		case slices.Contains(upgrades, name):
			problem(field, "Repeated upgrade", "%s is already in the list.", u)
		default:
			upgrades = append(upgrades, name)
		}
	}
	seen := map[string]string{} // extension, folded as the route folds it, to its field
	for i, ext := range r.IgnoreExtensions {
		field, key := fmt.Sprintf("ignore_extensions[%d]", i), ext
		if r.CaseInsensitive {
			key = strings.ToLower(ext)
		}
		if !validExtension(ext) {
			problem(field, "Invalid extension", "%q is not an extension: a dot and letters, digits, '-', '_' or '~', such as \".json\".", ext)
		} else if first, dup := seen[key]; dup {
			errs = append(errs, &option.Error{Field: field, Summary: "Repeated extension", Earlier: first,
				Detail: fmt.Sprintf("%s is already in the list at %s.", ext, first)})
		} else {
			seen[key] = field
		}
	}
	return errors.Join(errs...)
}

// MinFailureRetryAfter is the least Config.FailureRetryAfter may be when
// set: Retry-After counts whole seconds.
const MinFailureRetryAfter = time.Second

// Validate reports the problems of c's own settings, each a *option.Error
// naming the attribute as the file does, in its block
// ("limiter.deadline", "listen.body_read_timeout"), joined. A zero takes
// the default; anything else below the minimum is refused. The pools and
// routes are ValidatePools's, ValidateRoutes's and Route.Validate's.
func (c *Config) Validate() error {
	var errs []error
	for _, d := range []struct {
		field string
		value time.Duration
		min   time.Duration
	}{
		{"limiter.deadline", c.Deadline, MinTimeout},
		{"limiter.failure_retry_after", c.FailureRetryAfter, MinFailureRetryAfter},
		{"listen.tunnel_idle_timeout", c.TunnelIdleTimeout, MinTimeout},
		{"listen.body_read_timeout", c.BodyReadTimeout, MinTimeout},
	} {
		if d.value != 0 && d.value < d.min {
			name := d.field[strings.IndexByte(d.field, '.')+1:]
			errs = append(errs, &option.Error{Field: d.field, Summary: "Duration too short", Detail: fmt.Sprintf("%s must be at least %s.", name, d.min)})
		}
	}
	if c.MaxDelayed < 0 {
		errs = append(errs, &option.Error{Field: "limiter.max_delayed", Summary: "Value too small", Detail: "max_delayed must be at least 1."})
	}
	return errors.Join(errs...)
}

// ValidateRoutes reports the problems of routes as a list, each a
// *option.Error naming a route by its position ("routes[1]", its label
// "routes[1].operation_id"), joined: no operation ID twice, and no two
// routes that match the same requests, which would go to whichever comes
// first. A route whose ID is taken is reported for that alone; one
// without a path (a problem of its own) is compared with none.
func ValidateRoutes(routes []Route) error {
	var errs []error
	clash := func(i, first int, summary, detail string, args ...any) {
		field, earlier := fmt.Sprintf("routes[%d]", i), fmt.Sprintf("routes[%d]", first)
		if summary == "Duplicate route" {
			field += ".operation_id"
		}
		errs = append(errs, &option.Error{Field: field, Summary: summary, Earlier: earlier, Detail: fmt.Sprintf(detail, args...)})
	}
	seen := map[string]int{}
	var compared []int
	for i := range routes {
		r := &routes[i]
		if first, dup := seen[r.OperationID]; dup {
			clash(i, first, "Duplicate route", "A route labelled %q is already defined at routes[%d].", r.OperationID, first)
			continue
		}
		seen[r.OperationID] = i
		if r.Path == "" {
			continue
		}
		for _, j := range compared {
			o := &routes[j]
			switch {
			case !routesOverlap(o, r):
			case o.Path == r.Path:
				clash(i, j, "Routes overlap", "Route %q matches the same host, path and methods as %q at routes[%d].", r.OperationID, o.OperationID, j)
			default:
				clash(i, j, "Routes overlap once folded", "Route %q and %q at routes[%d] match the same host and methods, and one's case_insensitive or ignore_extensions folds the other's path into its own (%s, %s): which of them a request goes to would depend on their order.", r.OperationID, o.OperationID, j, r.Path, o.Path)
			}
		}
		compared = append(compared, i)
	}
	return errors.Join(errs...)
}

// ValidatePools reports the problems of pools as a list, each a
// *option.Error naming a pool by its position ("upstreams[1]", its name
// "upstreams[1].name"), joined: no name twice. Each pool's own rules are
// Pool.Validate's.
func ValidatePools(pools []Pool) error {
	var errs []error
	seen := map[string]int{}
	for i, p := range pools {
		if first, dup := seen[p.Name]; dup {
			errs = append(errs, &option.Error{Field: fmt.Sprintf("upstreams[%d].name", i), Summary: "Duplicate upstream", Earlier: fmt.Sprintf("upstreams[%d]", first),
				Detail: fmt.Sprintf("An upstream named %q is already defined at upstreams[%d].", p.Name, first)})
			continue
		}
		seen[p.Name] = i
	}
	return errors.Join(errs...)
}

// validatePolicies reports the problems of the policies a route or a plan
// (per) lists, named field: each once, and none nil.
func validatePolicies(field, per string, ps []*limiter.Policy) []error {
	var errs []error
	seen := map[string]bool{}
	for i, p := range ps {
		switch {
		case p == nil:
			errs = append(errs, &option.Error{Field: fmt.Sprintf("%s[%d]", field, i), Summary: "No policy", Detail: "A policy of the list is nil."})
		case seen[p.Name]:
			errs = append(errs, &option.Error{Field: fmt.Sprintf("%s[%d]", field, i), Summary: "Repeated policy",
				Detail: fmt.Sprintf("%q is already in the list; a policy counts once per %s.", p.Name, per)})
		default:
			seen[p.Name] = true
		}
	}
	return errs
}

// names are the header names of the rules, by field.
func (hr HeaderRules) names(block string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i, h := range hr.Set {
			if !yield(fmt.Sprintf("%s.set[%d]", block, i), h.Name) {
				return
			}
		}
		for i, n := range hr.Remove {
			if !yield(fmt.Sprintf("%s.remove[%d]", block, i), n) {
				return
			}
		}
	}
}

// validate reports the problems of one direction's rules, named in block:
// every name a header name the gateway does not manage, every value free
// of control characters, and no name twice (names are case-insensitive).
func (hr HeaderRules) validate(block string, managed []string) []error {
	var errs []error
	seen := map[string]string{} // canonical name to the field that gave it
	name := func(field, n string) {
		switch err := checkRuleHeader(n, managed); {
		case !validHeaderName(n):
			errs = append(errs, &option.Error{Field: field, Summary: "Invalid header name",
				Detail: fmt.Sprintf("%q is not a header name: letters, digits and !#$%%&'*+-.^_`|~ only.", n)})
		case err != nil:
			errs = append(errs, &option.Error{Field: field, Summary: "Header the gateway manages",
				Detail: fmt.Sprintf("%s; %s cannot set or remove it.", err, block)})
		default:
			k := http.CanonicalHeaderKey(n)
			if first, dup := seen[k]; dup {
				errs = append(errs, &option.Error{Field: field, Summary: "Duplicate header", Earlier: first,
					Detail: fmt.Sprintf("%s is already in %s at %s; names are case-insensitive.", k, block, first)})
				return
			}
			seen[k] = field
		}
	}
	for i, h := range hr.Set {
		field := fmt.Sprintf("%s.set[%d]", block, i)
		name(field, h.Name)
		if err := checkHeaderValue(h.Value); err != nil {
			errs = append(errs, &option.Error{Field: field + ".value", Summary: "Invalid header value",
				Detail: fmt.Sprintf("%s: %s.", h.Name, err)})
		}
	}
	for i, n := range hr.Remove {
		name(fmt.Sprintf("%s.remove[%d]", block, i), n)
	}
	return errs
}

// lowerCase is names in lower case, in a slice of its own.
func lowerCase(names []string) []string {
	if names == nil {
		return nil
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = strings.ToLower(n)
	}
	return out
}

// MinTimeout is the least a Pool's durations (its timeouts, its health
// check's interval and timeout) and Config's Deadline, TunnelIdleTimeout
// and BodyReadTimeout may be when set; zero takes the default.
const MinTimeout = time.Millisecond

// Validate reports every problem of p, each a *option.Error naming the field
// as an upstream block does ("targets[1]", "health.timeout"), joined.
func (p Pool) Validate() error {
	var errs []error
	problem := func(field, summary, detail string, args ...any) *option.Error {
		e := &option.Error{Field: field, Summary: summary, Detail: fmt.Sprintf(detail, args...)}
		errs = append(errs, e)
		return e
	}
	if p.Name == "" {
		problem("name", "Invalid upstream name", "A pool needs a name.")
	}
	if len(p.Targets) == 0 {
		problem("targets", "No targets", "targets needs at least one URL.")
	}
	seen := map[string]string{} // a target as a server sees it, to its field
	for i, s := range p.Targets {
		field := fmt.Sprintf("targets[%d]", i)
		t, ok := parseTarget(s)
		if !ok {
			problem(field, "Invalid target", "Each target must be an http:// or https:// URL with a host and no credentials, query or fragment, not %q.", s)
			continue
		}
		key := targetKey(t)
		if first, dup := seen[key]; dup {
			problem(field, "Duplicate target", "%s is already a target of this upstream, at %s.", t, first).Earlier = first
			continue
		}
		seen[key] = field
	}
	if p.Balance != RoundRobin && p.Balance != LeastRequests {
		problem("balance", "Unknown balance", "balance %d is neither round_robin nor least_requests.", p.Balance)
	}
	// A duration's zero is its default; any other is at least MinTimeout.
	atLeast := func(field string, d time.Duration) {
		if d != 0 && d < MinTimeout {
			problem(field, "Duration too short", "%s must be at least %s.", field[strings.LastIndexByte(field, '.')+1:], MinTimeout)
		}
	}
	atLeast("connect_timeout", p.ConnectTimeout)
	atLeast("response_timeout", p.ResponseTimeout)
	atLeast("fail_timeout", p.FailTimeout)
	if p.MaxEjectedPercent > 100 {
		problem("max_ejected_percent", "Value too large", "max_ejected_percent is a share of the upstream's targets, at most 100.")
	}
	if h := p.Health; h != nil {
		if n, err := NormalizePath(h.Path); err != nil || n != h.Path {
			problem("health.path", "Invalid health path", "path must be a normalized absolute path such as \"/healthz\", not %q.", h.Path)
		}
		before := len(errs)
		atLeast("health.interval", h.Interval)
		atLeast("health.timeout", h.Timeout)
		interval := defaultIfZero(h.Interval, DefaultHealthInterval)
		if len(errs) == before && h.Timeout > interval {
			problem("health.timeout", "Health timeout above interval", "timeout is %s but checks run every %s; a check must end before the next.", h.Timeout, interval)
		}
	}
	if o := p.Overload; o != nil {
		errs = append(errs, option.Within("overload", o.Validate())...)
		wait := defaultIfZero(o.QueueTimeout, overload.DefaultQueueTimeout)
		if respond := defaultIfZero(p.ResponseTimeout, DefaultResponseTimeout); wait > respond {
			problem("overload.queue_timeout", "queue_timeout above response_timeout", "queue_timeout is %s but the upstream's response_timeout is %s; a request would wait for a slot longer than for an answer.", wait, respond)
		}
	}
	return errors.Join(errs...)
}

// targetKey is a target as a server sees it, so that two spellings of one
// target are found out.
func targetKey(u *url.URL) string {
	return u.Scheme + "://" + strings.ToLower(u.Host) + strings.TrimSuffix(u.EscapedPath(), "/")
}
