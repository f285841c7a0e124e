package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// Problem types. The two rate-limit ones are registered by the IETF
// rate-limit headers draft; the rest are the gateway's own and stable.
const (
	typeQuotaExceeded    = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	typeReducedCapacity  = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	typeNoRoute          = "urn:edge-gateway:problem:no-route"
	typeMethodNotAllowed = "urn:edge-gateway:problem:method-not-allowed"
	typeBadPath          = "urn:edge-gateway:problem:bad-path"
	typeBadMethod        = "urn:edge-gateway:problem:bad-method"
	typeAmbiguousCred    = "urn:edge-gateway:problem:ambiguous-credential"
	typeUnidentified     = "urn:edge-gateway:problem:unidentified-subject"
	typeBadSubject       = "urn:edge-gateway:problem:bad-subject"
	typeUpstreamFailed   = "urn:edge-gateway:problem:upstream-failed"
	typeUpstreamTimeout  = "urn:edge-gateway:problem:upstream-timeout"
	typeNoTarget         = "urn:edge-gateway:problem:no-upstream-target"
	typeRequestTooLarge  = "urn:edge-gateway:problem:request-too-large"
	typeBadBody          = "urn:edge-gateway:problem:bad-body"
	typeInvalidToken     = "urn:edge-gateway:problem:invalid-token"
	typeKeysUnavailable  = "urn:edge-gateway:problem:token-keys-unavailable"
	typeBodyTimeout      = "urn:edge-gateway:problem:body-timeout"
	problemContentType   = "application/problem+json"
)

type problem struct {
	status int
	body   []byte
}

func newProblem(status int, typ, title, detail string) problem {
	b, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail,omitempty"`
	}{typ, title, status, detail})
	return problem{status: status, body: b}
}

var (
	problemNoRoute             = newProblem(http.StatusNotFound, typeNoRoute, "No route", "No route of this gateway matches the request.")
	problemMethodNotAllowed    = newProblem(http.StatusMethodNotAllowed, typeMethodNotAllowed, "Method not allowed", "The route that matches this path does not allow the method.")
	problemMethodCase          = newProblem(http.StatusBadRequest, typeBadMethod, "Bad method", "Methods are case-sensitive; this one differs from a known method only in case.")
	problemBadPath             = newProblem(http.StatusBadRequest, typeBadPath, "Bad request path", "The path has an encoded slash or backslash, a control character, a bad escape, a dot segment with parameters, a segment ending in a dot or a space, an overlong UTF-8 form, or a dot, slash or backslash encoded twice.")
	problemAmbiguousCredential = newProblem(http.StatusBadRequest, typeAmbiguousCred, "Ambiguous credentials", "A credential header was sent more than once.")
	problemBadSubject          = newProblem(http.StatusBadRequest, typeBadSubject, "Bad subject", "A header, cookie or query parameter this route identifies clients by is longer than 256 bytes, or its query value is not percent-encoded well.")
	problemUnidentified        = newProblem(http.StatusUnauthorized, typeUnidentified, "Unidentified client", "This route needs a principal or a known API key.")
	problemUnavailable         = newProblem(http.StatusServiceUnavailable, typeReducedCapacity, "Service temporarily unavailable", "The rate limiter could not decide; nothing was forwarded. Retry after the time given.")
	problemShed                = newProblem(http.StatusServiceUnavailable, typeReducedCapacity, "Upstream at capacity", "The upstream is at its limit and this request found no slot in time; nothing was forwarded. Retry after the time given.")
	problemUpstreamFailed      = newProblem(http.StatusBadGateway, typeUpstreamFailed, "Upstream failed", "The upstream could not be reached or broke the response.")
	problemNoTarget            = newProblem(http.StatusBadGateway, typeNoTarget, "No upstream target", "Every target of the upstream is out of rotation after failing; nothing was forwarded.")
	problemUpstreamTimeout     = newProblem(http.StatusGatewayTimeout, typeUpstreamTimeout, "Upstream timed out", "The upstream did not answer in time.")
	problemBadBody             = newProblem(http.StatusBadRequest, typeBadBody, "Malformed request body", "The request body could not be read as sent (for example a malformed chunk).")
	problemInvalidToken        = newProblem(http.StatusUnauthorized, typeInvalidToken, "Invalid token", "The bearer token is malformed, expired, not yet valid, for another issuer or audience, or not signed by a key and algorithm this gateway accepts.")
	problemKeysUnavailable     = newProblem(http.StatusServiceUnavailable, typeKeysUnavailable, "Token keys unavailable", "The gateway has not yet obtained the keys to verify bearer tokens; nothing was forwarded. Retry after the time given.")
	problemBodyTimeout         = newProblem(http.StatusRequestTimeout, typeBodyTimeout, "Request body timed out", "The client sent no byte of the request body for too long.")
	problemTooLarge            = newProblem(http.StatusRequestEntityTooLarge, typeRequestTooLarge, "Request body too large", "The request body is larger than this route accepts.")
)

var (
	headerInvalidToken = []string{`Bearer error="invalid_token"`}
	headerProblem      = []string{problemContentType}
	headerNoStore      = []string{"no-store"}
	headerNoSniff      = []string{"nosniff"}
	headerClose        = []string{"close"}
)

func writeProblem(w http.ResponseWriter, p problem) {
	writeBody(w, p.status, p.body)
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = headerProblem
	h["Cache-Control"] = headerNoStore
	h["X-Content-Type-Options"] = headerNoSniff
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	w.Write(body)
}

// writeInvalidToken answers a bearer token that failed verification, the
// RFC 6750 way.
func writeInvalidToken(w http.ResponseWriter) {
	w.Header()["Www-Authenticate"] = headerInvalidToken
	writeProblem(w, problemInvalidToken)
}

func writeUnavailable(w http.ResponseWriter, retryAfter string) {
	w.Header()["Retry-After"] = []string{retryAfter}
	writeProblem(w, problemUnavailable)
}

// writeQuotaExceeded answers 429; retry is the longest wait among the
// policies that denied.
func writeQuotaExceeded(w http.ResponseWriter, body []byte, retry time.Duration) {
	w.Header()["Retry-After"] = []string{strconv.FormatInt(max(ceilSeconds(retry), 1), 10)}
	writeBody(w, http.StatusTooManyRequests, body)
}

// quotaProblem is the 429 body naming every policy that denied.
func quotaProblem(violated []string) []byte {
	b, _ := json.Marshal(struct {
		Type     string   `json:"type"`
		Title    string   `json:"title"`
		Status   int      `json:"status"`
		Detail   string   `json:"detail"`
		Violated []string `json:"violated-policies"`
	}{typeQuotaExceeded, "Request cannot be satisfied as assigned quota has been exceeded", http.StatusTooManyRequests,
		"Retry after the time given in Retry-After.", violated})
	return b
}

// appendPolicyMember appends one member of the RateLimit-Policy list of
// draft-ietf-httpapi-ratelimit-headers-11: the policy's name (as a
// Structured Field string) with its quota and window in whole seconds. A
// concurrency policy's quota is in requests in flight, which no window
// measures: its unit says so, and it has no w. windowSeconds, when not 0,
// is the window of the decision at hand (a calendar period's length), in
// place of the policy's own.
func appendPolicyMember(b []byte, name string, p *limiter.Policy, windowSeconds uint32) []byte {
	b = append(b, name...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, p.Quota(), 10)
	if p.HoldsLeases() {
		return append(b, `;qu="concurrent-requests"`...)
	}
	b = append(b, ";w="...)
	if windowSeconds != 0 {
		return strconv.AppendUint(b, uint64(windowSeconds), 10)
	}
	return strconv.AppendInt(b, max(ceilSeconds(p.QuotaWindow()), 1), 10)
}

// sfString serializes s as a Structured Field string (RFC 8941 3.3.3).
// Policy names are validated to printable ASCII at load time.
func sfString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}

// ceilSeconds rounds d up to whole seconds. It divides before it rounds:
// adding a second first would overflow for a duration within a second of
// the longest, which a window in the configuration may be.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
