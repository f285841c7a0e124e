package subject

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/edgegate/gateway/internal/option"
)

// Source is one of a route's subject sources: a Kind, and for the field
// kinds (Header, Cookie, QueryParam) the name of the field it reads.
type Source struct {
	Kind Kind
	// Name is the field's name: a header's in canonical form, a cookie's
	// or a query parameter's as written (they are case-sensitive). It is
	// "" for the other kinds.
	Name string
}

// Sources are the sources of kinds that read no field, in order.
func Sources(kinds ...Kind) []Source {
	s := make([]Source, len(kinds))
	for i, k := range kinds {
		s[i] = Source{Kind: k}
	}
	return s
}

// String is the source as the configuration writes it: "client_ip",
// "header:X-Tenant".
func (s Source) String() string {
	if s.Kind.readsField() {
		return s.Kind.String() + ":" + s.Name
	}
	return s.Kind.String()
}

// readsField reports whether k is a field kind: a header, a cookie or a
// query parameter of the request, named by its Source.
func (k Kind) readsField() bool {
	return k == Header || k == Cookie || k == QueryParam
}

// MaxFieldValueBytes is the longest header, cookie or query parameter
// value a field source takes for an identity; a longer one is
// ErrBadSubject, refused before it is hashed.
const MaxFieldValueBytes = 256

// ErrBadSubject: the field a header, cookie or query source reads holds a
// value longer than MaxFieldValueBytes, or a query parameter that cannot
// be decoded.
var ErrBadSubject = errors.New("subject field value too long or undecodable")

// fieldExamples are the sources the field kinds' messages show.
var fieldExamples = map[Kind]string{Header: "header:X-Tenant", Cookie: "cookie:session", QueryParam: "query:key"}

// ParseSource maps a configuration name ("client_ip", "header:X-Tenant",
// "cookie:session", "query:key") to a Source; an unknown kind, a field
// kind without a name, or a name that is not ValidName is an
// *option.Error of the field subject.
func ParseSource(s string) (Source, error) {
	kindName, name, named := strings.Cut(s, ":")
	k, err := ParseKind(kindName)
	if err != nil {
		return Source{}, err
	}
	switch {
	case k.readsField() && !ValidName(name):
		return Source{}, &option.Error{Field: "subject", Summary: "Invalid field name",
			Detail: fmt.Sprintf("%s reads the field named after a colon, such as %q; the name is 1 to 128 letters, digits, '.', '-' and '_'.", kindName, fieldExamples[k])}
	case !k.readsField() && named:
		return Source{}, &option.Error{Field: "subject", Summary: "Unexpected field name",
			Detail: fmt.Sprintf("Only header, cookie and query read a named field; %s takes no name.", kindName)}
	}
	if k == Header {
		name = http.CanonicalHeaderKey(name)
	}
	return Source{Kind: k, Name: name}, nil
}

// ParseNamed reads a subject as the admin API names it, KIND:IDENTITY,
// where a field kind's KIND is its source (header:X-Tenant:acme).
func ParseNamed(s string) (Source, string, error) {
	kindName, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Source{}, "", errors.New("subject is KIND:IDENTITY")
	}
	if k, err := ParseKind(kindName); err == nil && k.readsField() {
		name, identity, ok := strings.Cut(rest, ":")
		if !ok {
			return Source{}, "", fmt.Errorf("subject is %s:NAME:VALUE", kindName)
		}
		kindName, rest = kindName+":"+name, identity
	}
	src, err := ParseSource(kindName)
	if err != nil {
		return Source{}, "", err
	}
	return src, rest, nil
}

// field is the value of the field src reads from req, its identity: ""
// when the field is absent or empty (the next source is tried). A field
// sent more than once is ErrAmbiguousCredential; a value over
// MaxFieldValueBytes, or a query parameter with a bad escape, is
// ErrBadSubject.
func field(req *http.Request, src Source) (string, error) {
	var values []string
	switch src.Kind {
	case Header:
		values = req.Header[src.Name]
	case Cookie:
		for _, c := range req.CookiesNamed(src.Name) {
			values = append(values, c.Value)
		}
	case QueryParam:
		var err error
		if values, err = queryValues(req.URL.RawQuery, src.Name); err != nil {
			return "", err
		}
	}
	switch {
	case len(values) > 1:
		return "", ErrAmbiguousCredential
	case len(values) == 0:
		return "", nil
	}
	v := strings.TrimSpace(values[0])
	if len(v) > MaxFieldValueBytes {
		return "", ErrBadSubject
	}
	return fieldIdentity(src.Name, v), nil
}

// fieldIdentity frames a field's name before its value, so that the same
// value in two fields is two identities: header:A and header:B never
// share a budget. An empty value stays empty: no identity.
func fieldIdentity(name, value string) string {
	if value == "" {
		return ""
	}
	b := make([]byte, 0, 4+len(name)+len(value))
	b = binary.BigEndian.AppendUint32(b, uint32(len(name)))
	b = append(b, name...)
	return string(append(b, value...))
}

// queryValues are the values of the parameter name in a raw query,
// decoded once as a query is (url.QueryUnescape: '+' is a space, each
// %XX one byte), and never again: "%2541" is "%41". Pairs are separated
// by '&' only. A pair whose name is name but whose value has a bad escape
// is ErrBadSubject; other pairs are not read beyond their name.
func queryValues(raw, name string) ([]string, error) {
	var values []string
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(k); err != nil || k != name {
			continue
		}
		v, err := url.QueryUnescape(v)
		if err != nil {
			return nil, ErrBadSubject
		}
		values = append(values, v)
	}
	return values, nil
}

// fingerprint is the identity of the ja4 and ja4+client_ip sources: the
// connection's fingerprint, framed before the client_ip identity for the
// latter; "" when either is missing.
func (in Inbound) fingerprint(k Kind) string {
	r := in.r
	if r.fingerprint == nil {
		return ""
	}
	ja4 := r.fingerprint(in.req.Context())
	if k == JA4 || ja4 == "" {
		return ja4
	}
	client := r.clientIdentity(r.clientAddr(in.req, in.peer, in.peerTrusted))
	if client == "" {
		return ""
	}
	return fieldIdentity(ja4, client)
}

// namedFingerprint is the identity Named gives a ja4 subject (a
// fingerprint) or a ja4+client_ip one ("FINGERPRINT,ADDRESS").
func (r *Resolver) namedFingerprint(k Kind, identity string) (string, error) {
	if r.fingerprint == nil {
		return "", fmt.Errorf("%s: no tls block is configured", k)
	}
	if k == JA4 {
		return identity, nil
	}
	ja4, address, ok := strings.Cut(identity, ",")
	a, err := netip.ParseAddr(address)
	if !ok || ja4 == "" || err != nil {
		return "", errors.New("ja4+client_ip: the identity is FINGERPRINT,ADDRESS")
	}
	return fieldIdentity(ja4, r.clientIdentity(a.Unmap())), nil
}
