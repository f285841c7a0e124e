package config

import (
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

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
	o := &subject.JWTOptions{Header: or(b.Header, ""), Issuer: b.Issuer, Claim: or(b.Claim, ""), PlanClaim: or(b.PlanClaim, "")}
	if b.PlanClaim != nil && strings.TrimSpace(o.PlanClaim) == "" {
		c.errorf(valueRange(b.Body, "plan_claim"), "Empty plan_claim", "plan_claim names the claim that holds a token's plan, such as \"plan\".")
	}
	if b.Header != nil && !isName(o.Header) {
		c.errorf(valueRange(b.Body, "header"), "Invalid header name", "header must be a header name such as \"Authorization\".")
	}
	switch {
	case b.JWKSFile != nil && b.JWKSURL != nil:
		c.errorf(valueRange(b.Body, "jwks_url"), "Two key sets", "Set jwks_file or jwks_url, not both.")
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
		if !c.decodeFailed(valueRange(b.Body, "jwks_url")) && !trustedKeysURL(*b.JWKSURL) {
			c.errorf(valueRange(b.Body, "jwks_url"), "Invalid jwks_url", "jwks_url must be an https:// URL (http:// only to a loopback address): keys fetched in the clear could be anyone's.")
		}
		o.JWKSURL = *b.JWKSURL
	default:
		c.errorf(b.DefRange, "No key set", "jwt needs jwks_file or jwks_url.")
	}
	if valueRange(b.Body, "issuer") != (hcl.Range{}) && strings.TrimSpace(b.Issuer) == "" {
		c.errorf(valueRange(b.Body, "issuer"), "Empty issuer", "issuer must be the iss every accepted token carries.")
	}
	for _, it := range c.list(b.Audience, "audience") {
		if it.value == "" {
			c.errorf(it.rng, "Empty audience", "Each audience is an aud value a token may carry.")
			continue
		}
		o.Audience = append(o.Audience, it.value)
	}
	if emptyList(b.Audience) {
		c.errorf(b.Audience.Range(), "No audience", "audience needs at least one value: a token for another API of the same issuer must not pass.")
	}
	if b.Claim != nil && o.Claim == "" {
		c.errorf(valueRange(b.Body, "claim"), "Empty claim", "claim names the claim that holds the principal, such as \"sub\".")
	}
	o.MaxTokenBytes = int(c.integer(b.MaxTokenBytes, b.Body, "max_token_bytes", 0, 1))
	o.Leeway = c.duration(b.Leeway, b.Body, "leeway", 0, 0)
	if o.Leeway > 5*time.Minute {
		c.errorf(valueRange(b.Body, "leeway"), "Leeway too long", "leeway forgives clock skew; at most 5m.")
	}
	items := c.list(b.Algorithms, "algorithms")
	for _, it := range items {
		switch {
		case strings.EqualFold(it.value, "none"):
			c.errorf(it.rng, "Algorithm not allowed", "\"none\" is no signature.")
		case strings.HasPrefix(strings.ToUpper(it.value), "HS"):
			c.errorf(it.rng, "Algorithm not allowed", "%s needs a shared secret; a key set publishes public keys. Algorithms are %s.", it.value, strings.Join(subject.Algorithms, ", "))
		case !slices.Contains(subject.Algorithms, it.value):
			c.errorf(it.rng, "Unknown algorithm", "%q is not one of %s.", it.value, strings.Join(subject.Algorithms, ", "))
		case slices.Contains(o.Algorithms, it.value):
			c.errorf(it.rng, "Repeated algorithm", "%s is already in the list.", it.value)
		default:
			o.Algorithms = append(o.Algorithms, it.value)
		}
	}
	if emptyList(b.Algorithms) {
		c.errorf(b.Algorithms.Range(), "No algorithm", "algorithms needs at least one of %s.", strings.Join(subject.Algorithms, ", "))
	}
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

// emptyList reports a literal []; a list that failed to evaluate is
// reported already.
func emptyList(expr hcl.Expression) bool {
	exprs, diags := hcl.ExprList(expr)
	return !diags.HasErrors() && len(exprs) == 0
}

// trustedKeysURL: keys come over TLS, or from this machine.
func trustedKeysURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.User != nil {
		return false
	}
	switch u.Scheme {
	case "https":
		return true
	case "http":
		host := u.Hostname()
		if host == "localhost" {
			return true
		}
		ip := net.ParseIP(host)
		return ip != nil && ip.IsLoopback()
	}
	return false
}
