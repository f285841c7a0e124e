// Package option names a problem with one field of a package's options as
// the configuration file names it, so that config, which holds the file
// and its source ranges, can point at it. Each package that checks its
// own options (limiter, proxy, edge, subject, overload, telemetry) reports
// *Error values, joined; config reads them in one place.
package option

import (
	"fmt"
	"strconv"
	"strings"
)

// Error is one problem with one field.
type Error struct {
	// Field is the attribute as its block writes it ("max_cost",
	// "dedup.ttl", "targets[1]", "tls.acme.domains[0]"); "" for the block
	// as a whole.
	Field string
	// Summary is a title, such as "Value too small".
	Summary string
	// Detail is a sentence, such as "max_cost must be at least 1.".
	Detail string
	// Earlier, when set, is the field of the first of two that clash,
	// which Detail names.
	Earlier string
}

func (e *Error) Error() string { return e.Detail }

// Unknown is the problem of field, whose value names none of names (in
// the order the documentation lists them): the message every package's
// parser of a configuration name gives.
func Unknown(field, summary, value string, names []string) *Error {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = strconv.Quote(n)
	}
	list := quoted[0]
	if n := len(quoted); n > 1 {
		list = strings.Join(quoted[:n-1], ", ") + " or " + quoted[n-1]
	}
	return &Error{Field: field, Summary: summary, Detail: fmt.Sprintf("%s must be %s, not %q.", field, list, value)}
}

// Within returns the problems joined in err, each a copy whose Field (and
// Earlier) is within block: "queue_timeout" within "overload" is
// "overload.queue_timeout". An error that is no *Error is kept as it is.
func Within(block string, err error) []error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *Error:
			c := *e
			c.Field = join(block, c.Field)
			if c.Earlier != "" {
				c.Earlier = join(block, c.Earlier)
			}
			out = append(out, &c)
		case interface{ Unwrap() []error }:
			for _, each := range e.Unwrap() {
				walk(each)
			}
		default:
			out = append(out, err)
		}
	}
	walk(err)
	return out
}

func join(block, field string) string {
	switch {
	case block == "":
		return field
	case field == "":
		return block
	}
	return block + "." + field
}
