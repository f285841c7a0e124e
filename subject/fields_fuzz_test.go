package subject_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/edgegate/gateway/subject"
)

// FuzzSubjectFields feeds a header value, a Cookie line and a raw query to
// a route identified by header:X-Tenant, cookie:session, then query:key.
// The subject is the first source with a value, that value as the admin
// API names it (Named); the query value is the one url.ParseQuery decodes;
// a value over MaxFieldBytes is never a subject; a source sent twice is
// ErrAmbiguousCredential, and nothing identifies nobody.
func FuzzSubjectFields(f *testing.F) {
	for _, seed := range []struct{ header, cookie, query string }{
		{"acme", "", ""},
		{"", "session=acme", "key=acme"},
		{"", "session=a; session=b", ""},
		{"", "session=\"quoted\"", "key=%2561&key=b"},
		{"", "", "key=%zz;x=1&key=+a+"},
		{"", "", "k%65y=" + strings.Repeat("%41", 300)},
		{strings.Repeat("x", 257), "", ""},
	} {
		f.Add(seed.header, seed.cookie, seed.query)
	}
	r, err := subject.NewResolver(subject.Options{PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1})
	if err != nil {
		f.Fatal(err)
	}
	var kinds []subject.Kind
	for _, n := range []string{"header:X-Tenant", "cookie:session", "query:key"} {
		k, err := subject.ParseKind(n)
		if err != nil {
			f.Fatal(err)
		}
		kinds = append(kinds, k)
	}
	q := subject.Query{Sources: kinds, OperationID: "op"}

	f.Fuzz(func(t *testing.T, header, cookie, query string) {
		req := &http.Request{Method: "GET", URL: &url.URL{Path: "/", RawQuery: query}, Header: http.Header{}, RemoteAddr: "192.0.2.1:1"}
		if header != "" {
			req.Header["X-Tenant"] = []string{header}
		}
		if cookie != "" {
			req.Header["Cookie"] = []string{cookie}
		}
		got, err := r.Resolve(req, q)
		if err != nil {
			if !errors.Is(err, subject.ErrBadSubject) && !errors.Is(err, subject.ErrAmbiguousCredential) && !errors.Is(err, subject.ErrUnidentified) {
				t.Fatalf("unexpected error %v", err)
			}
			if errors.Is(err, subject.ErrUnidentified) && header != "" && len(header) <= subject.MaxFieldBytes {
				t.Fatalf("header %q identifies nobody", header)
			}
			return
		}
		var want string
		switch got.Kind {
		case kinds[0]:
			want = header
		case kinds[1]:
			c := req.CookiesNamed("session")
			if len(c) != 1 {
				t.Fatalf("identified by cookie among %d cookies", len(c))
			}
			want = c[0].Value
		case kinds[2]:
			values, _ := url.ParseQuery(query)
			if len(values["key"]) != 1 {
				t.Fatalf("query %q: identified by key, which url.ParseQuery reads as %q", query, values["key"])
			}
			want = values["key"][0]
		}
		if len(want) > subject.MaxFieldBytes || want == "" {
			t.Fatalf("identified by a value of %d bytes", len(want))
		}
		named, err := r.Named(got.Kind, want, "", q)
		if err != nil || named != got {
			t.Fatalf("%s %q: resolved %+v, named %+v, %v", got.Kind, want, got, named, err)
		}
	})
}
