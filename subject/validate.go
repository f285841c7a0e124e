package subject

import (
	"errors"
	"fmt"

	"github.com/edgegate/gateway/internal/option"
)

// Validate reports the problems of o's header names and IPv6 prefix, each
// a *option.Error naming the attribute as a subject block does
// ("principal_header"), joined: each header that is set is a header name,
// and an IPv6Prefix that is set is ValidIPv6Prefix. NewResolver refuses
// what it reports; the pseudonym keys are ValidatePseudonymKeys's, the jwt
// block JWTOptions.Validate's.
func (o *Options) Validate() error {
	var errs []error
	for _, h := range []struct{ field, value string }{
		{"forwarded_header", o.ForwardedHeader},
		{"principal_header", o.PrincipalHeader},
		{"api_key_header", o.APIKeyHeader},
		{"plan_header", o.PlanHeader},
	} {
		if h.value != "" && !ValidName(h.value) {
			errs = append(errs, &option.Error{Field: h.field, Summary: "Invalid header name",
				Detail: fmt.Sprintf("%s must be a header name such as \"X-API-Key\".", h.field)})
		}
	}
	switch {
	case o.IPv6Prefix < 0:
		errs = append(errs, &option.Error{Field: "ipv6_prefix", Summary: "Value too small", Detail: "ipv6_prefix must be at least 1."})
	case o.IPv6Prefix != 0 && !ValidIPv6Prefix(o.IPv6Prefix):
		errs = append(errs, &option.Error{Field: "ipv6_prefix", Summary: "Invalid prefix length", Detail: "ipv6_prefix must be between 1 and 128."})
	}
	return errors.Join(errs...)
}

// ValidName reports whether s is a name as the configuration writes one:
// 1 to 128 letters, digits, '.', '-' and '_'. The header names the
// resolver reads are such names, and so are plan names.
func ValidName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
