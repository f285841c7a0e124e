package subject_test

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/edgegate/gateway/subject"
)

// FuzzFieldSources resolves requests whose query, X-Tenant header and
// Cookie header are fuzzed, each through its field source followed by
// client_ip, and checks the outcome against what the field holds: the
// query as url.ParseQuery decodes it (when it decodes the whole query),
// the header as written. A value sent twice is ambiguous, one over 256
// bytes (once trimmed) is ErrBadSubject, an empty or absent one falls
// through to client_ip, and any other is the subject Named gives it,
// framed with its field's name.
func FuzzFieldSources(f *testing.F) {
	for _, seed := range []struct{ query, header, cookie string }{
		{"key=acme", "acme", "session=acme"},
		{"key=%2541&key=A", " ", "session=a; session=a"},
		{"key=" + strings.Repeat("x", 257), strings.Repeat("y", 300), "session=" + strings.Repeat("z", 257)},
		{"key=%zz", "", "session="},
		{"key=+a+&other=%25%32%35", "\t a \t", "other=1; session=\"quoted\""},
		{"k%65y=1;key=2", "a, b", "session"},
	} {
		f.Add(seed.query, seed.header, seed.cookie)
	}
	r := newResolver(f)
	sources := map[string]subject.Source{}
	for _, name := range []string{"query:key", "header:X-Tenant", "cookie:session"} {
		src, err := subject.ParseSource(name)
		if err != nil {
			f.Fatal(err)
		}
		sources[name] = src
	}
	f.Fuzz(func(t *testing.T, query, header, cookie string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "203.0.113.7:5000"
		req.URL.RawQuery = query
		req.Header["X-Tenant"] = strings.Split(header, "\n")
		req.Header["Cookie"] = []string{cookie}
		for name, src := range sources {
			q := subject.Query{Sources: []subject.Source{src, {Kind: subject.ClientIP}}, OperationID: "op"}
			got, err := r.Resolve(req, q)
			var values []string
			switch src.Kind {
			case subject.QueryParam:
				parsed, perr := url.ParseQuery(query)
				if perr != nil {
					checkFieldProperties(t, name, got, err)
					continue
				}
				values = parsed["key"]
			case subject.Header:
				values = req.Header["X-Tenant"]
			case subject.Cookie:
				for _, c := range req.CookiesNamed("session") {
					values = append(values, c.Value)
				}
			}
			var want error
			value := ""
			switch {
			case len(values) > 1:
				want = subject.ErrAmbiguousCredential
			case len(values) == 1:
				value = strings.TrimSpace(values[0])
				if len(value) > subject.MaxFieldValueBytes {
					want = subject.ErrBadSubject
				}
			}
			if !errors.Is(err, want) || (want == nil && err != nil) {
				t.Fatalf("%s: err %v, want %v", name, err, want)
			}
			if err != nil {
				continue
			}
			if value == "" {
				if got.Kind != subject.ClientIP {
					t.Fatalf("%s: no value, but the subject is %v", name, got.Kind)
				}
				continue
			}
			named, nerr := r.Named(src, value, "", q)
			if nerr != nil || got != named {
				t.Fatalf("%s: resolved %+v, named %+v (%v)", name, got, named, nerr)
			}
		}
	})
}

// checkFieldProperties holds for any query: an identity from the field
// is a field subject, and an error is one of the field's refusals.
func checkFieldProperties(t *testing.T, name string, got subject.Subject, err error) {
	t.Helper()
	switch {
	case err != nil && !errors.Is(err, subject.ErrAmbiguousCredential) && !errors.Is(err, subject.ErrBadSubject):
		t.Fatalf("%s: err %v", name, err)
	case err == nil && got.Kind != subject.QueryParam && got.Kind != subject.ClientIP:
		t.Fatalf("%s: kind %v", name, got.Kind)
	}
}
