package limiter

import (
	"strings"

	"github.com/edgegate/gateway/internal/option"
)

// Phase says when in a request's life the limiter is asked, which decides
// how a policy charged by the response (Policy.ChargedByResponse) is
// treated. Request-counted policies are decided alike in both.
type Phase uint8

const (
	// Admission is before forwarding: a response-charged policy is
	// charged its Reserve when that fits, like any charge, and the
	// admission carries what settles it (Admitted.Settlement).
	Admission Phase = iota
	// Settlement is after the response: every policy of the request is
	// charged Cost and allows, even when that takes its budget below zero
	// (a debt, which later admissions see as nothing left until it is paid
	// back: a window ends, a bucket refills). Remaining may then be
	// negative; the caller shows it as 0.
	Settlement
)

// Statuses is a set of HTTP status codes, comparable so that a Policy
// stays comparable. Codes from 1 to 1023 are kept as they are; any other
// is kept as 0, which Validate refuses like any code outside 200 to 599.
type Statuses [16]uint64

// StatusSet is the set of codes.
func StatusSet(codes ...int) Statuses {
	var s Statuses
	for _, c := range codes {
		if c < 1 || c >= 64*len(s) {
			c = 0
		}
		s[c/64] |= 1 << (c % 64)
	}
	return s
}

// Has reports whether code is in the set.
func (s *Statuses) Has(code int) bool {
	return code >= 1 && code < 64*len(s) && s[code/64]&(1<<(code%64)) != 0
}

// Codes are the set's codes, in order (0 for a code that was out of
// range).
func (s *Statuses) Codes() []int {
	var codes []int
	for c := range 64 * len(s) {
		if s[c/64]&(1<<(c%64)) != 0 {
			codes = append(codes, c)
		}
	}
	return codes
}

// ChargedByResponse reports whether the policy is charged by the
// upstream's response (CountStatuses or CostHeader) rather than when the
// request is admitted.
func (p *Policy) ChargedByResponse() bool {
	return p.CountStatuses != (Statuses{}) || p.CostHeader != ""
}

// validateResponseCharge adds the problems of CountStatuses and
// CostHeader.
func (p *Policy) validateResponseCharge(problem func(field, summary, detail string, args ...any)) {
	for _, c := range p.CountStatuses.Codes() {
		if c < 200 || c > 599 {
			problem("count_statuses", "Invalid status", "count_statuses holds %d; a response is charged by its final status, 200 to 599.", c)
			break
		}
	}
	if p.ChargedByResponse() && p.HoldsLeases() {
		// A lease is a place, held while the request is in flight; nothing
		// the response says changes how many places there are.
		field := "count_statuses"
		if p.CostHeader != "" {
			field = "cost_header"
		}
		problem(field, "Argument not valid for "+p.Algorithm.String(), "%s does not apply to %s: it holds a lease per request in flight.", field, p.Algorithm)
	}
	if p.ChargedByResponse() && p.Lease > 1 {
		// A lease admits from units charged when it was taken; a response
		// charge comes after the request, from the shared budget.
		problem("lease", "lease with a response charge", "lease does not apply to a policy charged by the response (count_statuses, cost_header).")
	}
	if p.ChargedByResponse() && p.Reserve < 1 {
		problem("reserve", "Value too small", "reserve must be at least 1.")
	}
	if p.CostHeader != "" {
		if !validHeaderName(p.CostHeader) {
			problem("cost_header", "Invalid header name", "cost_header %q is not a header name.", p.CostHeader)
		}
		if p.CountStatuses != (Statuses{}) {
			problem("cost_header", "Two ways to charge", "A policy is charged by count_statuses or by cost_header, not both.")
		}
		if p.MaxCost == 1 {
			// max_cost's default suits a route's cost; left at it here,
			// every response would be charged at most 1 whatever the
			// upstream says, and the headers would look right.
			problem("cost_header", "cost_header without max_cost", "max_cost is 1, so no response would be charged more than 1 whatever cost_header says; set max_cost to the most one response may cost (at most the quota).")
		}
	}
}

// validHeaderName: an RFC 9110 token.
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return s != ""
}

// ReserveNotTaken is the problem of a policy that sets reserve without
// being charged by the response: a file's (Validate ignores the field
// there, which has a default).
func ReserveNotTaken() *option.Error {
	return &option.Error{Field: "reserve", Summary: "reserve without a response charge",
		Detail: "reserve applies only to a policy charged by the response (count_statuses, cost_header)."}
}
