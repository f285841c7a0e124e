package edge_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/edgegate/gateway/edge"
	"github.com/edgegate/gateway/internal/option"
)

// The listeners' rules are edge's: each problem names its field as the
// configuration file does, so that configuration can point at it.
func TestValidateNamesTheFieldOfEachProblem(t *testing.T) {
	o := edge.Options{HTTPS: ":8443", ClientIPv6Prefix: 129, TLS: &edge.TLSOptions{ACME: &edge.ACMEOptions{
		Domains: []string{"example.com", "a b"}, Challenges: []string{edge.ChallengeHTTP01, "dns-01"}, CA: "http://ca.example"}}}
	fields := problemFields(t, o.Validate())
	want := []string{"subject.ipv6_prefix", "tls.acme.domains[1]", "tls.acme.challenges[1]", "tls.acme.challenges", "tls.acme.ca"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if err := (edge.Options{HTTP: ":8080"}).Validate(); err != nil {
		t.Errorf("a plain listener: %v", err)
	}
}

// A listener's addresses and minimums are edge's alone: zero takes the
// default, anything else below the minimum is refused.
func TestValidateHoldsTheListenersToTheirMinimums(t *testing.T) {
	o := edge.Options{HTTP: "8080", Admin: "localhost:admin", ReadHeaderTimeout: -time.Second,
		IdleTimeout: edge.MinTimeout / 2, MaxHeaderBytes: edge.MinMaxHeaderBytes - 1}
	fields := problemFields(t, o.Validate())
	want := []string{"listen.http", "listen.admin", "listen.read_header_timeout", "listen.idle_timeout", "listen.max_header_bytes"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	ok := edge.Options{HTTP: "127.0.0.1:8080", Admin: ":9901", IdleTimeout: edge.MinTimeout, MaxHeaderBytes: edge.MinMaxHeaderBytes}
	if err := ok.Validate(); err != nil {
		t.Errorf("the minimums, and a default: %v", err)
	}
}

// An HSTS max-age is whole seconds: zero sends none, anything else below
// a second is refused.
func TestValidateHoldsHSTSMaxAgeToASecond(t *testing.T) {
	certs := []edge.CertificateFiles{{CertFile: "c.pem", KeyFile: "k.pem"}}
	for _, d := range []time.Duration{-1, edge.MinHSTSMaxAge / 2} {
		o := edge.Options{HTTPS: ":8443", TLS: &edge.TLSOptions{HSTSMaxAge: d, Certificates: certs}}
		if fields := problemFields(t, errors.Join(o.Validate())); !slices.Equal(fields, []string{"tls.hsts_max_age"}) {
			t.Errorf("hsts_max_age %s: fields %q", d, fields)
		}
	}
	for _, d := range []time.Duration{0, edge.MinHSTSMaxAge} {
		if err := (edge.Options{HTTPS: ":8443", TLS: &edge.TLSOptions{HSTSMaxAge: d, Certificates: certs}}).Validate(); err != nil {
			t.Errorf("hsts_max_age %s: %v", d, err)
		}
	}
}

// problemFields are the fields err's problems name.
func problemFields(t *testing.T, err error) []string {
	t.Helper()
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *option.Error
		if !errors.As(e, &fe) {
			t.Fatalf("%v is no FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	return fields
}
