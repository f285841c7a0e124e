package subject_test

import (
	"context"
	"net/http"
	"net/netip"
	"testing"

	"github.com/edgegate/gateway/subject"
)

type fingerprintKey struct{}

// The ja4 sources read the connection's fingerprint; the admin API's
// names of them give the same pseudonyms; without a fingerprint, or from
// a trusted proxy, whose fingerprint is its own, they fall through.
func TestJA4Sources(t *testing.T) {
	const fp = "t13d1516h2_8daaf6152771_e5627efa2ab1"
	r, err := subject.NewResolver(subject.Options{
		TrustedProxies:   []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		PseudonymKeys:    map[int][]byte{1: []byte(fakeSecret)},
		PseudonymVersion: 1,
		TLSFingerprint:   func(ctx context.Context) string { s, _ := ctx.Value(fingerprintKey{}).(string); return s },
	})
	if err != nil {
		t.Fatal(err)
	}
	withFP := func(req *http.Request) *http.Request {
		return req.WithContext(context.WithValue(req.Context(), fingerprintKey{}, fp))
	}
	q := func(k subject.Kind) subject.Query {
		return subject.Query{Sources: []subject.Kind{k, subject.ClientIP}, OperationID: "op"}
	}
	for _, c := range []struct {
		kind  subject.Kind
		named string
	}{
		{subject.JA4, fp},
		{subject.JA4ClientIP, fp + "+203.0.113.7"},
	} {
		t.Run(c.kind.String(), func(t *testing.T) {
			got, err := r.Resolve(withFP(request("203.0.113.7:5000")), q(c.kind))
			if err != nil || got.Kind != c.kind {
				t.Fatalf("%+v, %v", got, err)
			}
			named, err := r.Named(c.kind, c.named, "", q(c.kind))
			if err != nil || named != got {
				t.Fatalf("named %+v, %v; resolved %+v", named, err, got)
			}
			// No fingerprint: the next source.
			plain, err := r.Resolve(request("203.0.113.7:5000"), q(c.kind))
			if err != nil || plain.Kind != subject.ClientIP {
				t.Fatalf("without a fingerprint: %+v, %v", plain, err)
			}
			// A trusted proxy's fingerprint: the next source, the client
			// it forwards.
			proxied, err := r.Resolve(withFP(request("10.0.0.1:5000", "X-Forwarded-For", "203.0.113.7")), q(c.kind))
			if err != nil || proxied != plain {
				t.Fatalf("from a trusted proxy: %+v, %v; want %+v", proxied, err, plain)
			}
		})
	}
	for _, bad := range []struct {
		kind  subject.Kind
		named string
	}{
		{subject.JA4, "nope"},
		{subject.JA4, fp + "+203.0.113.7"},
		{subject.JA4ClientIP, fp},
		{subject.JA4ClientIP, fp + "+nowhere"},
		{subject.JA4, "T13d1516h2_8daaf6152771_e5627efa2ab1"},
	} {
		if _, err := r.Named(bad.kind, bad.named, "", q(bad.kind)); err == nil {
			t.Errorf("Named(%s, %q) gave no error", bad.kind, bad.named)
		}
	}
}
