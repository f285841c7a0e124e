package proxy

import (
	"net/netip"
	"unicode/utf8"
)

// The access log's lines about requests that forward nothing (denials,
// refusals, invalid tokens, no route, limiter failures) are throttled per
// route, client and outcome (edge.LogThrottle), so that the log grows no
// faster than the limiter lets requests through. refusalLogKey names the
// requests one line stands for. The client is the
// subject's pseudonym, or for a request that has none (no route, a
// refusal before the subject is known), the client's address prefix,
// which stays in memory and is never logged.
// The reason (why a token was refused) counts as part of the outcome: a
// fixed set, so that every kind of refusal still shows.
type refusalLogKey struct {
	route, outcome, reason string
	pseudonym              string
	client                 netip.Prefix
}

// maxLogField is the most bytes an access log field holds: nothing a
// client sends is logged whole.
const maxLogField = 256

// clampField cuts s to maxLogField bytes, on a character boundary.
func clampField(s string) string {
	if len(s) <= maxLogField {
		return s
	}
	i := maxLogField
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
