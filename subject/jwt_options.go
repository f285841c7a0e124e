package subject

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/edgegate/gateway/internal/option"
)

// MaxLeeway is the most clock skew JWTOptions.Leeway may forgive.
const MaxLeeway = 5 * time.Minute

// Validate reports every problem of o, each a *option.Error, joined: a key
// set (Keys, or a JWKSURL to fetch them from over TLS or from this
// machine), an issuer, at least one audience, each a value, at least one
// algorithm of Algorithms, each once, a leeway between 0 and MaxLeeway,
// a Header, Claim and PlanClaim that, when set, are a header name and not
// blank, and a MaxTokenBytes not negative (zero is the default). It reads
// and fetches nothing.
func (o *JWTOptions) Validate() error {
	var errs []error
	problem := func(field, summary, detail string, args ...any) {
		errs = append(errs, &option.Error{Field: field, Summary: summary, Detail: fmt.Sprintf(detail, args...)})
	}
	switch {
	case o.JWKSURL != "" && !trustedKeysURL(o.JWKSURL):
		problem("jwks_url", "Invalid jwks_url", "jwks_url must be an https:// URL (http:// only to a loopback address): keys fetched in the clear could be anyone's.")
	case o.Keys == nil && o.JWKSURL == "":
		problem("jwks_file", "No key set", "jwt needs jwks_file or jwks_url.")
	}
	if strings.TrimSpace(o.Issuer) == "" {
		problem("issuer", "Empty issuer", "issuer must be the iss every accepted token carries.")
	}
	for i, a := range o.Audience {
		if a == "" {
			problem(fmt.Sprintf("audience[%d]", i), "Empty audience", "Each audience is an aud value a token may carry.")
		}
	}
	if len(o.Audience) == 0 {
		problem("audience", "No audience", "audience needs at least one value: a token for another API of the same issuer must not pass.")
	}
	for i, a := range o.Algorithms {
		field := fmt.Sprintf("algorithms[%d]", i)
		switch {
		case strings.EqualFold(a, "none"):
			problem(field, "Algorithm not allowed", "\"none\" is no signature.")
		case strings.HasPrefix(strings.ToUpper(a), "HS"):
			problem(field, "Algorithm not allowed", "%s needs a shared secret; a key set publishes public keys. Algorithms are %s.", a, strings.Join(Algorithms, ", "))
		case !slices.Contains(Algorithms, a):
			problem(field, "Unknown algorithm", "%q is not one of %s.", a, strings.Join(Algorithms, ", "))
		case slices.Contains(o.Algorithms[:i], a):
			problem(field, "Repeated algorithm", "%s is already in the list.", a)
		}
	}
	if len(o.Algorithms) == 0 {
		problem("algorithms", "No algorithm", "algorithms needs at least one of %s.", strings.Join(Algorithms, ", "))
	}
	if o.Header != "" && !ValidName(o.Header) {
		problem("header", "Invalid header name", "header must be a header name such as \"Authorization\".")
	}
	if o.Claim != "" && strings.TrimSpace(o.Claim) == "" {
		problem("claim", "Empty claim", "claim names the claim that holds the principal, such as \"sub\".")
	}
	if o.PlanClaim != "" && strings.TrimSpace(o.PlanClaim) == "" {
		problem("plan_claim", "Empty plan_claim", "plan_claim names the claim that holds a token's plan, such as \"plan\".")
	}
	if o.MaxTokenBytes < 0 {
		problem("max_token_bytes", "Value too small", "max_token_bytes must be at least 1.")
	}
	switch {
	case o.Leeway < 0:
		problem("leeway", "Duration too short", "leeway must be at least 0s.")
	case o.Leeway > MaxLeeway:
		problem("leeway", "Leeway too long", "leeway forgives clock skew; at most 5m.")
	}
	return errors.Join(errs...)
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
