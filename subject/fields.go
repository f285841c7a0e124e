package subject

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
)

// MaxFieldBytes is the longest value a header, cookie or query source
// takes. A longer one is refused (ErrBadSubject), never hashed: a client
// cannot make the gateway sign megabytes per request.
const MaxFieldBytes = 256

// ErrBadSubject: a header, cookie or query source's value is longer than
// MaxFieldBytes, or a query value is not percent-encoded well.
var ErrBadSubject = errors.New("subject field value too long or malformed")

// fieldValue is the value of k's request field, "" when it is absent or
// empty: the header's (its repetition is ErrAmbiguousCredential, checked
// by Resolve with the credential headers), the cookie's, or the query
// parameter's, decoded once as url.ParseQuery decodes it. A cookie or
// parameter sent twice is ErrAmbiguousCredential.
func fieldValue(req *http.Request, k Kind) (string, error) {
	var v string
	switch k.source {
	case sourceHeader:
		v = req.Header.Get(k.field)
	case sourceCookie:
		cookies := req.CookiesNamed(k.field)
		if len(cookies) > 1 {
			return "", ErrAmbiguousCredential
		}
		if len(cookies) == 1 {
			v = cookies[0].Value
		}
	case sourceQuery:
		var err error
		if v, err = queryValue(req.URL.RawQuery, k.field); err != nil {
			return "", err
		}
	}
	if len(v) > MaxFieldBytes {
		return "", ErrBadSubject
	}
	return v, nil
}

// queryValue is the value of the parameter name in the raw query, decoded
// once; a parameter whose name or value does not decode is not read, as
// url.ParseQuery skips it, except that a bad value of name itself is
// ErrBadSubject. Pairs holding ';' are skipped, as url.ParseQuery does.
func queryValue(raw, name string) (string, error) {
	var value string
	found := false
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		key, v, _ := strings.Cut(pair, "=")
		if key != name {
			if !strings.ContainsAny(key, "%+") {
				continue
			}
			if decoded, err := url.QueryUnescape(key); err != nil || decoded != name {
				continue
			}
		}
		if found {
			return "", ErrAmbiguousCredential
		}
		if len(v) > 3*MaxFieldBytes {
			return "", ErrBadSubject // longer than any encoding of a value it takes
		}
		decoded, err := url.QueryUnescape(v)
		if err != nil {
			return "", ErrBadSubject
		}
		value, found = decoded, true
	}
	return value, nil
}
