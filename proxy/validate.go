package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// FieldError is one problem with one field of a Route, named as the
// configuration file names it: an attribute ("host_header"), an element of
// a list ("upgrade[2]"), or a name or value of a header rule
// ("request_headers.remove[0]", "response_headers.set[1]",
// "response_headers.set[1].value"), so that a caller holding the file can
// point at it. Earlier, when set, is the field of the first of two that
// clash; Detail names it by that field.
type FieldError struct {
	Field   string
	Summary string // a title, such as "Invalid host_header"
	Detail  string // a sentence
	Earlier string
}

func (e *FieldError) Error() string { return e.Detail }

// Validate reports every problem of r's rewrite, host header, header rules,
// upgrades and ignored extensions, each a *FieldError, joined. managed are the request headers
// the resolver reads (subject.Options.ManagedHeaders), which no header rule
// may touch.
func (r *Route) Validate(managed []string) error {
	var errs []error
	problem := func(field, summary, detail string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Summary: summary, Detail: fmt.Sprintf(detail, args...)})
	}
	if r.Rewrite {
		if _, err := NormalizeRewritePrefix(r.RewritePrefix); err != nil {
			problem("rewrite_prefix", "Invalid rewrite_prefix", "rewrite_prefix %s, not %q.", err, r.RewritePrefix)
		}
	}
	if r.HostHeader != "" && !validHostHeader(r.HostHeader) {
		problem("host_header", "Invalid host_header", "host_header must be a host name or address with an optional port, such as \"orders.internal\" or \"10.0.0.7:8080\", not %q.", r.HostHeader)
	}
	errs = append(errs, r.RequestHeaders.validate("request_headers", managed)...)
	errs = append(errs, r.ResponseHeaders.validate("response_headers", managed)...)
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
			errs = append(errs, &FieldError{Field: field, Summary: "Repeated extension", Earlier: first,
				Detail: fmt.Sprintf("%s is already in the list at %s.", ext, first)})
		} else {
			seen[key] = field
		}
	}
	return errors.Join(errs...)
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
			errs = append(errs, &FieldError{Field: field, Summary: "Invalid header name",
				Detail: fmt.Sprintf("%q is not a header name: letters, digits and !#$%%&'*+-.^_`|~ only.", n)})
		case err != nil:
			errs = append(errs, &FieldError{Field: field, Summary: "Header the gateway manages",
				Detail: fmt.Sprintf("%s; %s cannot set or remove it.", err, block)})
		default:
			k := http.CanonicalHeaderKey(n)
			if first, dup := seen[k]; dup {
				errs = append(errs, &FieldError{Field: field, Summary: "Duplicate header", Earlier: first,
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
			errs = append(errs, &FieldError{Field: field + ".value", Summary: "Invalid header value",
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
