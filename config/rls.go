package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/proxy"
	"github.com/edgegate/gateway/subject"
)

// rlsRules reads the rls_rule blocks; what they may map is
// proxy.ValidateRLSRules's to say, placed at the attribute it names.
func (c *checker) rlsRules(blocks []*rlsRuleBlock, policies map[string]*limiter.Policy, so *subject.Options, routes []proxy.Route) []proxy.RLSRule {
	var rules []proxy.RLSRule
	elements := map[string]hcl.Range{}
	for _, b := range blocks {
		if !isName(b.Name) {
			c.errorf(b.NameRange, "Invalid rls_rule name", "rls_rule labels are letters, digits, '.', '-' and '_'.")
			continue
		}
		field := fmt.Sprintf("rls_rules[%d]", len(rules))
		r := proxy.RLSRule{Name: b.Name, Domain: b.Domain, Route: or(b.Route, "")}
		elements[field] = b.DefRange
		elements[field+".domain"] = attrRange(b.Body, "domain")
		elements[field+".descriptor"] = b.Descriptor.Range()
		elements[field+".route"] = attrRange(b.Body, "route")
		r.Descriptor = c.descriptor(b, so, field, elements)
		if has(b.Body, "policies") {
			policyElements := map[string]hcl.Range{}
			r.Policies, _ = c.policyList(c.list(b.Policies, "policies"), "policies", policyElements, c.policyNamed(policies))
			for f, rng := range policyElements {
				elements[field+"."+f] = rng
			}
			elements[field+".policies"] = b.Policies.Range()
		}
		rules = append(rules, r)
	}
	c.fields(proxy.ValidateRLSRules(rules, routes), "Invalid rls_rule", hcl.Range{}, finderOf(nil, nil, elements))
	return rules
}

// descriptor reads a rule's entries; its subject entry must be a source
// the rest of the file makes usable.
func (c *checker) descriptor(b *rlsRuleBlock, so *subject.Options, field string, elements map[string]hcl.Range) []proxy.DescriptorEntry {
	var entries []proxy.DescriptorEntry
	subjectSeen := false
	for _, it := range c.list(b.Descriptor, "descriptor") {
		e := proxy.ParseDescriptorEntry(it.value)
		elements[fmt.Sprintf("%s.descriptor[%d]", field, len(entries))] = it.rng
		if k, err := subject.ParseKind(e.Key); err == nil && !subjectSeen {
			subjectSeen = true
			// A ja4 entry's value is the caller's fingerprint: no HTTPS
			// listener of this gateway needed.
			c.sourceUsable(k, it.rng, knownSources(so, true))
		}
		entries = append(entries, e)
	}
	return entries
}
