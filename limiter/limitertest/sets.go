package limitertest

import (
	"sync"

	"github.com/edgegate/gateway/limiter"
)

// sets holds One's sets by policy, with the policy value each was made
// of; setsMu makes each once, whatever goroutines ask at once.
var (
	setsMu sync.Mutex
	sets   = map[*limiter.Policy]oneSet{}
)

type oneSet struct {
	policy limiter.Policy
	set    *limiter.PolicySet
}

// One is the set of p alone, the same set for the same policy while p is
// unchanged, as a route's requests share their route's set: a backend's
// state kept per set (remembered denials, leases of budget) then carries
// from one of a test's requests to the next. A test that changes p gets a
// new set, made of what p is now.
func One(p *limiter.Policy) *limiter.PolicySet {
	setsMu.Lock()
	defer setsMu.Unlock()
	if o, ok := sets[p]; ok && o.policy == *p {
		return o.set
	}
	s := limiter.MustPolicySet(p)
	sets[p] = oneSet{policy: *p, set: s}
	return s
}
