package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/edgegate/gateway/limiter"
	"github.com/edgegate/gateway/subject"
)

// maxJWKSFileBytes bounds jwks_file: a key set is a few kilobytes.
const maxJWKSFileBytes = 1 << 20

// jwt checks the subject.jwt block. A jwks_file is read and parsed here,
// so a reload with a broken one is refused and the running keys stay; a
// jwks_url is left for the caller, which fetches it and keeps it across
// reloads.
func (c *checker) jwt(b *jwtBlock) *subject.JWTOptions {
	o := &subject.JWTOptions{Header: optionString(b.Header), Issuer: b.Issuer, Claim: optionString(b.Claim), PlanClaim: optionString(b.PlanClaim)}
	switch {
	case b.JWKSFile != nil && b.JWKSURL != nil:
		c.errorf(valueRange(b.Body, "jwks_url"), "Two key sets", "Set jwks_file or jwks_url, not both.")
		o.JWKSURL = *b.JWKSURL
	case b.JWKSFile != nil:
		path := c.path(*b.JWKSFile)
		src, err := readFile(path, maxJWKSFileBytes)
		if err != nil {
			c.errorf(valueRange(b.Body, "jwks_file"), "Cannot read jwks_file", "%s.", err)
			break
		}
		keys, err := subject.ParseKeySet(src)
		if err != nil {
			c.errorf(valueRange(b.Body, "jwks_file"), "Invalid jwks_file", "%s: %s.", path, err)
			break
		}
		o.Keys = keys
	case b.JWKSURL != nil:
		o.JWKSURL = *b.JWKSURL
	}
	o.MaxTokenBytes = optionInt(b.MaxTokenBytes)
	o.Leeway = c.durationOr(b.Leeway, b.Body, "leeway", 0)
	// What the key set, issuer, audience, algorithms, leeway, header,
	// claims and max_token_bytes may be is subject.JWTOptions.Validate's; each list element is
	// read with its range. A required attribute left out is the decoder's
	// to report.
	elements := map[string]hcl.Range{}
	for i, it := range c.list(b.Audience, "audience") {
		elements[fmt.Sprintf("audience[%d]", i)] = it.rng
		o.Audience = append(o.Audience, it.value)
	}
	for i, it := range c.list(b.Algorithms, "algorithms") {
		elements[fmt.Sprintf("algorithms[%d]", i)] = it.rng
		o.Algorithms = append(o.Algorithms, it.value)
	}
	var absent []string
	for _, name := range []string{"issuer", "audience", "algorithms"} {
		if !has(b.Body, name) {
			absent = append(absent, name)
		}
	}
	c.fields(o.Validate(), "Invalid jwt block", b.DefRange, finderOf(map[string]hcl.Body{"": b.Body}, nil, elements), absent...)
	return o
}

// invalidTokenPolicy is the policy jwt.invalid_token_policy names, or nil
// for the default.
func (c *checker) invalidTokenPolicy(b *jwtBlock, policies map[string]*limiter.Policy) *limiter.Policy {
	if b == nil || b.InvalidTokenPolicy == nil || c.decodeFailed(valueRange(b.Body, "invalid_token_policy")) {
		return nil
	}
	p, ok := policies[*b.InvalidTokenPolicy]
	if !ok {
		c.errorf(valueRange(b.Body, "invalid_token_policy"), "Unknown policy", "No policy block is named %q.", *b.InvalidTokenPolicy)
	}
	if p != nil && p.ChargedByResponse() {
		// An invalid token is refused before any upstream: no response
		// would ever charge the budget.
		c.errorf(valueRange(b.Body, "invalid_token_policy"), "Policy charged by the response", "Policy %q is charged by the response (count_statuses or cost_header), and an invalid token gets no response from an upstream.", p.Name)
		return nil
	}
	return p
}
