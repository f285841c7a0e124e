package proxy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/subject"
)

// RLSRule maps a domain and descriptor of Envoy's rate limit service
// (RateLimitService) to a budget: a route's (its policies, plans and
// subject sources) or one of its own.
type RLSRule struct {
	// Name is the rule block's label: the operation ID of a budget of its
	// own, and what metrics and logs call it.
	Name   string
	Domain string
	// Descriptor are the entries a request's descriptor must hold, in
	// order, for the rule to match it. The first whose key is a subject
	// kind carries the subject's identity; a "plan" entry, the plan of a
	// principal or jwt subject.
	Descriptor []DescriptorEntry
	// Route draws on that route's budget; else Policies are the budget,
	// with Name as their operation ID.
	Route    string
	Policies []*limiter.Policy
}

// DescriptorEntry is one entry of an RLSRule: a key, and a value it must
// hold when HasValue.
type DescriptorEntry struct {
	Key, Value string
	HasValue   bool
}

func (e DescriptorEntry) String() string {
	if e.HasValue {
		return e.Key + "=" + e.Value
	}
	return e.Key
}

// ParseDescriptorEntry reads "key" or "key=value"; ValidateRLSRules says
// whether the entry is one.
func ParseDescriptorEntry(s string) DescriptorEntry {
	key, value, hasValue := strings.Cut(s, "=")
	return DescriptorEntry{Key: key, Value: value, HasValue: hasValue}
}

// valid reports whether e can match an entry of a call: a key of no
// spaces, key and value within the bounds a call is held to.
func (e DescriptorEntry) valid() bool {
	return e.Key != "" && !strings.ContainsAny(e.Key, " \t") && len(e.Key) <= maxDescriptorValueBytes && len(e.Value) <= maxDescriptorValueBytes
}

// maxDescriptorValueBytes bounds an entry's key and value in a rule; in a
// request, a key (a longer one is refused) and the subject's value (a
// longer one is OVER_LIMIT, never hashed).
const maxDescriptorValueBytes = 256

// subjectEntry is the index of the rule's first entry whose key is a
// subject kind, and that kind; -1 when it has none.
func (r *RLSRule) subjectEntry() (int, subject.Kind) {
	for i, e := range r.Descriptor {
		if k, err := subject.ParseKind(e.Key); err == nil {
			return i, k
		}
	}
	var none subject.Kind
	return -1, none
}

// rlsPlanKey is the key of the descriptor entry that carries the plan of
// a subject whose plan comes with each request.
const rlsPlanKey = "plan"

// planEntry is the index of the rule's plan entry; -1 when it has none.
func (r *RLSRule) planEntry() int {
	return slices.IndexFunc(r.Descriptor, func(e DescriptorEntry) bool { return e.Key == rlsPlanKey })
}

// ValidateRLSRules reports the problems of rules against routes, each a
// *option.Error naming the rule by its position ("rls_rules[1]",
// "rls_rules[1].descriptor"), joined.
func ValidateRLSRules(rules []RLSRule, routes []Route) error {
	var errs []error
	problem := func(i int, field, summary, detail string, args ...any) {
		f := fmt.Sprintf("rls_rules[%d]", i)
		if field != "" {
			f += "." + field
		}
		errs = append(errs, &option.Error{Field: f, Summary: summary, Detail: fmt.Sprintf(detail, args...)})
	}
	seen := map[string]int{}
	for i := range rules {
		r := &rules[i]
		if r.Domain == "" {
			problem(i, "domain", "No domain", "domain must name the domain Envoy's rate limit filter sends.")
		}
		at, kind := r.subjectEntry()
		switch {
		case len(r.Descriptor) == 0:
			problem(i, "descriptor", "No descriptor", "descriptor needs at least one entry, one of them a subject kind such as \"api_key\".")
		case at < 0:
			problem(i, "descriptor", "No subject in the descriptor", "descriptor needs an entry whose key is a subject kind (client_ip, api_key, principal, ...): it carries whom the budget is for.")
		}
		sound := true
		for j, e := range r.Descriptor {
			if !e.valid() {
				sound = false
				problem(i, fmt.Sprintf("descriptor[%d]", j), "Invalid descriptor entry",
					"A descriptor entry is \"key\" or \"key=value\", a key of no spaces, each at most %d bytes, not %q.", maxDescriptorValueBytes, e.String())
			}
		}
		key := r.Domain + "\x00" + descriptorKey(r.Descriptor)
		if first, dup := seen[key]; dup && sound {
			errs = append(errs, &option.Error{Field: fmt.Sprintf("rls_rules[%d].descriptor", i), Summary: "Duplicate rls_rule",
				Earlier: fmt.Sprintf("rls_rules[%d].descriptor", first), Detail: "Another rule has this domain and descriptor; only the first could ever match."})
		} else if sound {
			seen[key] = i
		}
		errs = append(errs, validateRLSBudget(i, r, at, kind, routes, problem)...)
	}
	return errors.Join(errs...)
}

// validateRLSBudget checks what a rule draws on: a route that identifies
// subjects by the rule's kind, or policies of its own; either way none
// whose charge needs the end of a request, which a call of the service
// never tells.
func validateRLSBudget(i int, r *RLSRule, at int, kind subject.Kind, routes []Route, problem func(int, string, string, string, ...any)) []error {
	if (r.Route == "") == (len(r.Policies) == 0) {
		problem(i, "", "Route or policies", "An rls_rule takes route = \"r\" or policies = [...], one of the two.")
		return nil
	}
	lists := [][]*limiter.Policy{r.Policies}
	if r.Route != "" {
		j := slices.IndexFunc(routes, func(rt Route) bool { return rt.OperationID == r.Route })
		if j < 0 {
			problem(i, "route", "Unknown route", "No route is named %q.", r.Route)
			return nil
		}
		rt := &routes[j]
		if at >= 0 && !slices.Contains(rt.Subject, kind) {
			problem(i, "descriptor", "Subject the route does not know", "Route %q does not identify subjects by %s; the descriptor's subject must be one of its sources.", r.Route, kind)
		}
		validateRLSPlan(i, r, at, kind, rt, problem)
		lists = [][]*limiter.Policy{rt.Policies}
		for _, ps := range rt.Plans {
			lists = append(lists, ps)
		}
	}
	var errs []error
	if r.Route == "" {
		validateRLSPlan(i, r, at, kind, nil, problem)
		errs = validatePolicies("policies", "rls_rule", r.Policies)
		for j := range errs {
			errs[j].(*option.Error).Field = fmt.Sprintf("rls_rules[%d].%s", i, errs[j].(*option.Error).Field)
		}
		for _, p := range r.Policies {
			if p != nil && p.Penalty > 0 && !p.Shadow {
				// A penalty box is a route's: its admin API lists and
				// lifts by route, and HTTP shares it.
				problem(i, "policies", "Penalty with no box", "Policy %q has a penalty, which holds a subject in a route's penalty box; an rls_rule of its own policies has none: name the route (route = \"r\") whose policies and box the rule shares.", p.Name)
				return errs
			}
		}
	}
	for _, ps := range lists {
		for _, p := range ps {
			if p != nil && (p.HoldsLeases() || p.ChargedByResponse()) {
				field := "policies"
				if r.Route != "" {
					field = "route"
				}
				problem(i, field, "Policy with no end over RLS", "Policy %q is charged or released when a response ends, which a call of the rate limit service never tells.", p.Name)
				return errs
			}
		}
	}
	return errs
}

// validateRLSPlan checks the rule's plan entries: at most one, for a
// principal or jwt subject, on rt, a route that maps plans (nil: the
// rule's own policies, which map none).
func validateRLSPlan(i int, r *RLSRule, at int, kind subject.Kind, rt *Route, problem func(int, string, string, string, ...any)) {
	first := r.planEntry()
	if first < 0 {
		return
	}
	field := fmt.Sprintf("descriptor[%d]", first)
	for j := first + 1; j < len(r.Descriptor); j++ {
		if r.Descriptor[j].Key == rlsPlanKey {
			problem(i, fmt.Sprintf("descriptor[%d]", j), "Repeated plan entry", "A rule names one plan entry: a call's descriptor with two is OVER_LIMIT, as HTTP refuses a plan header sent twice.")
			return
		}
	}
	e := r.Descriptor[first]
	switch {
	case at < 0 || !plannedPerRequest(kind):
		problem(i, field, "Plan entry with no principal", "A plan entry carries the plan of a principal or jwt subject; this descriptor has none (an API key's plan is its line's).")
	case rt == nil:
		problem(i, field, "Plan entry with no plans", "A plan entry needs route = \"r\", a route with plans; the rule's own policies map none.")
	case len(rt.Plans) == 0:
		problem(i, field, "Plan entry with no plans", "Route %q maps no plans, so a plan entry would change nothing.", rt.OperationID)
	case e.HasValue && rt.Plans[e.Value] == nil:
		problem(i, field, "Plan the route does not map", "Route %q maps no plan %q.", rt.OperationID, e.Value)
	}
}

// descriptorKey is entries as one string, for comparing rules.
func descriptorKey(entries []DescriptorEntry) string {
	var b strings.Builder
	for _, e := range entries {
		b.WriteString(e.String())
		b.WriteByte(0)
	}
	return b.String()
}

// rlsRule is an RLSRule compiled: the budget it draws on and where its
// subject is.
type rlsRule struct {
	RLSRule
	subjectAt int
	kind      subject.Kind
	planAt    int // -1: the rule names no plan entry
	valued    int // entries with a value
	// route is the route whose budget the rule draws on; for a budget of
	// its own, a route of the rule's alone (no upstream, no path).
	route *route
}

// rlsTable is the rules of each domain, the first that matches a
// descriptor first: the most entries, then the most valued, then file
// order.
type rlsTable map[string][]*rlsRule

func compileRLSRules(rules []RLSRule, routes []*route) (rlsTable, error) {
	t := rlsTable{}
	for _, r := range rules {
		cr := &rlsRule{RLSRule: r}
		cr.subjectAt, cr.kind = cr.subjectEntry()
		cr.planAt = cr.planEntry()
		for _, e := range r.Descriptor {
			if e.HasValue {
				cr.valued++
			}
		}
		if r.Route != "" {
			i := slices.IndexFunc(routes, func(rt *route) bool { return rt.OperationID == r.Route })
			cr.route = routes[i]
		} else {
			l, err := newLimits(r.Policies)
			if err != nil {
				return nil, fmt.Errorf("rls_rule %q: %w", r.Name, err)
			}
			own := &route{Route: Route{OperationID: r.Name, Subject: []subject.Kind{cr.kind}, Cost: 1}, limits: l}
			own.query = subject.Query{Sources: own.Subject, OperationID: r.Name, MapsPlan: own.mapsPlan}
			cr.route = own
		}
		t[r.Domain] = append(t[r.Domain], cr)
	}
	for _, rs := range t {
		slices.SortStableFunc(rs, func(a, b *rlsRule) int {
			if d := len(b.Descriptor) - len(a.Descriptor); d != 0 {
				return d
			}
			return b.valued - a.valued
		})
	}
	return t, nil
}

// rlsMatch is what the entries matched to a rule's subject and plan
// entries carry.
type rlsMatch struct{ identity, plan string }

// match is the rule of domain that entries match, and what they carry for
// it; nil when none does.
func (t rlsTable) match(domain string, entries []descriptorPair) (*rlsRule, rlsMatch) {
	for _, r := range t[domain] {
		if m, ok := r.matches(entries); ok {
			return r, m
		}
	}
	return nil, rlsMatch{}
}

// descriptorPair is one entry of a request's descriptor.
type descriptorPair struct{ key, value string }

// matches reports whether entries hold the rule's entries in order, and
// the values of those matched to its subject and plan entries.
func (r *rlsRule) matches(entries []descriptorPair) (rlsMatch, bool) {
	var m rlsMatch
	j := 0
	for i, want := range r.Descriptor {
		for j < len(entries) && (entries[j].key != want.Key || want.HasValue && entries[j].value != want.Value) {
			j++
		}
		if j == len(entries) {
			return rlsMatch{}, false
		}
		switch i {
		case r.subjectAt:
			m.identity = entries[j].value
		case r.planAt:
			m.plan = entries[j].value
		}
		j++
	}
	return m, true
}
