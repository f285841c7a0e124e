package subject

import (
	"errors"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
)

// MaxFieldBytes is the longest value a header, cookie or query source
// takes. A longer one is refused (ErrBadSubject), never hashed: a client
// cannot make the gateway sign megabytes per request.
const MaxFieldBytes = 256

// ErrBadSubject: a header, cookie or query source's value is longer than
// MaxFieldBytes, or a query value is not percent-encoded well, or the
// client sent a cookie or parameter that a backend may read as the
// source's in a form the gateway does not read (readsAs): had it fallen
// through, the next source's budget would hold a client the upstream
// knows by the field.
var ErrBadSubject = errors.New("subject field value too long or malformed")

// fieldValue is the value of k's request field, "" when it is absent or
// empty: the header's (its repetition is ErrAmbiguousCredential, checked
// by Resolve with the credential headers), the cookie's, or the query
// parameter's, decoded once as url.ParseQuery decodes it. A cookie or
// parameter sent twice is ErrAmbiguousCredential; one that Go's parsers
// drop is ErrBadSubject.
func fieldValue(req *http.Request, k Kind) (string, error) {
	var v string
	switch k.source {
	case sourceHeader:
		v = req.Header.Get(k.field)
	case sourceCookie:
		// Every cookie Go's parser keeps under the name is one of those
		// read as it: none of these, none to parse.
		n := cookiesReadAs(req.Header["Cookie"], k.field)
		if n == 0 {
			break
		}
		cookies := req.CookiesNamed(k.field)
		switch {
		case len(cookies) > 1:
			return "", ErrAmbiguousCredential
		case n > len(cookies):
			return "", ErrBadSubject // a value Go's parser drops, or a name PHP folds
		}
		v = cookies[0].Value
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
// ErrBadSubject. A pair url.ParseQuery skips for its ';', or one whose
// name readsAs name but is not it, is ErrBadSubject.
func queryValue(raw, name string) (string, error) {
	var value string
	found := false
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if strings.Contains(pair, ";") {
			// Rack 2 and Pythons before 3.9.2 split pairs on ';' too.
			for part := range strings.SplitSeq(pair, ";") {
				key, _, _ := strings.Cut(part, "=")
				if readsAs(queryKey(key), name) {
					return "", ErrBadSubject
				}
			}
			continue
		}
		key, v, _ := strings.Cut(pair, "=")
		if key = queryKey(key); key != name {
			if readsAs(key, name) {
				return "", ErrBadSubject
			}
			continue
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

// queryKey is a parameter's name decoded once, as it is when it does not
// decode: PHP keeps a bad escape as written.
func queryKey(key string) string {
	if !strings.ContainsAny(key, "%+") {
		return key
	}
	if decoded, err := url.QueryUnescape(key); err == nil {
		return decoded
	}
	return key
}

// cookiesReadAs is how many of the cookies in the Cookie lines have a
// name that readsAs name, values well-formed or not; the lines are split
// and trimmed as net/http splits and trims them.
func cookiesReadAs(lines []string, name string) int {
	n := 0
	for _, line := range lines {
		for part := range strings.SplitSeq(line, ";") {
			key, _, _ := strings.Cut(textproto.TrimString(part), "=")
			if readsAs(textproto.TrimString(key), name) {
				n++
			}
		}
	}
	return n
}

// readsAs reports whether a backend may read a parameter or cookie named
// key as one named name. PHP drops a name's leading spaces and reads '.',
// ' ' and an unclosed '[' as '_' (a closed one leaves a ']', which no
// name holds). Case counts, as it does for the gateway.
func readsAs(key, name string) bool {
	key = strings.TrimLeft(key, " ")
	if len(key) != len(name) {
		return false
	}
	for i := 0; i < len(key); i++ {
		if phpNameByte(key[i]) != phpNameByte(name[i]) {
			return false
		}
	}
	return true
}

func phpNameByte(c byte) byte {
	switch c {
	case '.', ' ', '[':
		return '_'
	}
	return c
}
