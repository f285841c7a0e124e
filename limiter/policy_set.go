package limiter

import (
	"errors"
	"fmt"
	"slices"
)

// PolicySet is the policies of one route or plan, compiled once, when the
// configuration is loaded: validated, with every rule that depends on the
// whole list decided there, and immutable after. A request names its
// PolicySet (Request.Policies), and a backend that keeps state per list
// (remembered denials, leases of budget, a fallback's divided policies)
// keys it by the *PolicySet: a set is its own identity, and a reload makes
// new ones.
//
// The policies are decided at once, atomically, for the same subject and
// cost. De-duplication follows the first policy's Dedup, and so does the
// clock a backend reads to time the set's bookkeeping (Dedup, Clock): a
// choice made here once, not by each backend.
type PolicySet struct {
	list []*Policy

	holdsLeases       bool
	delays            bool
	chargedByResponse bool
	// leased: every policy has a lease of budget (Policy.Lease), and only
	// then may a request be admitted without Redis. A set that mixes
	// policies with and without one needs Redis for every request anyway,
	// so it is decided there exactly.
	leased bool

	// scriptArgs is each policy's part of the Redis script's call, made once
	// (script_args.go).
	scriptArgs []scriptPolicy
	// single is each policy as a set of its own, for a lease of budget
	// given back alone or a policy settled alone; nil unless the set is
	// leased or charged by the response.
	single []*PolicySet
}

// NewPolicySet compiles ps, in order, into a set. It reports every
// problem: an empty list, a nil policy, a name listed twice, and each
// policy's own (Policy.Validate).
func NewPolicySet(ps ...*Policy) (*PolicySet, error) {
	if len(ps) == 0 {
		return nil, errors.New("a policy set needs at least one policy")
	}
	var errs []error
	seen := map[string]bool{}
	for i, p := range ps {
		switch {
		case p == nil:
			errs = append(errs, fmt.Errorf("policy %d of the set is nil", i))
			continue
		case seen[p.Name]:
			errs = append(errs, fmt.Errorf("policy %q is twice in the set", p.Name))
		}
		seen[p.Name] = true
		if err := p.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return compileSet(ps), nil
}

// compileSet is the set of ps, which must be valid.
func compileSet(ps []*Policy) *PolicySet {
	s := &PolicySet{list: slices.Clone(ps), leased: true}
	for _, p := range s.list {
		s.holdsLeases = s.holdsLeases || p.HoldsLeases()
		s.delays = s.delays || p.MaxDelay > 0
		s.chargedByResponse = s.chargedByResponse || p.ChargedByResponse()
		s.leased = s.leased && p.Lease > 1
		s.scriptArgs = append(s.scriptArgs, newScriptPolicy(p))
	}
	if (s.leased || s.chargedByResponse) && len(s.list) > 1 {
		for _, p := range s.list {
			s.single = append(s.single, compileSet([]*Policy{p}))
		}
	}
	return s
}

// MustPolicySet is NewPolicySet for lists known to be valid, such as a
// test's; it panics on a problem.
func MustPolicySet(ps ...*Policy) *PolicySet {
	s, err := NewPolicySet(ps...)
	if err != nil {
		panic(err)
	}
	return s
}

// Len is the number of policies.
func (s *PolicySet) Len() int { return len(s.list) }

// Policy is the i-th policy, in the order the set was made in.
func (s *PolicySet) Policy(i int) *Policy { return s.list[i] }

// Policies is the set's policies in order, in a slice of the caller's.
func (s *PolicySet) Policies() []*Policy { return slices.Clone(s.list) }

// HoldsLeases reports whether a policy of the set counts requests in
// flight: a request it admits holds leases until it is released.
func (s *PolicySet) HoldsLeases() bool { return s.holdsLeases }

// Delays reports whether a policy of the set may delay a request
// (MaxDelay).
func (s *PolicySet) Delays() bool { return s.delays }

// ChargedByResponse reports whether a policy of the set is charged by the
// upstream's response (Phase).
func (s *PolicySet) ChargedByResponse() bool { return s.chargedByResponse }

// Dedup is the set's de-duplication: its first policy's.
func (s *PolicySet) Dedup() Dedup { return s.list[0].Dedup }

// clockPolicy is the policy whose clock times the set's own bookkeeping
// (when a decision was sent, when leases of budget were used): the first.
func (s *PolicySet) clockPolicy() *Policy { return s.list[0] }

// alone is the set's i-th policy as a set of its own; the set itself when
// it has one policy. Only a leased set has them (a lease of budget goes
// back alone), and one charged by the response (a policy is settled
// alone).
func (s *PolicySet) alone(i int) *PolicySet {
	if len(s.list) == 1 {
		return s
	}
	return s.single[i]
}
