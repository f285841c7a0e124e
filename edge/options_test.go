package edge_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/edgegate/gateway/edge"
)

// The listeners' rules are edge's: each problem names its field as the
// configuration file does, so that configuration can point at it.
func TestValidateNamesTheFieldOfEachProblem(t *testing.T) {
	o := edge.Options{HTTPS: ":8443", ClientIPv6Prefix: 129, TLS: &edge.TLSOptions{ACME: &edge.ACMEOptions{
		Domains: []string{"example.com", "a b"}, Challenges: []string{edge.ChallengeHTTP01, "dns-01"}, CA: "http://ca.example"}}}
	var fields []string
	for _, e := range o.Validate().(interface{ Unwrap() []error }).Unwrap() {
		var fe *edge.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is no FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	want := []string{"subject.ipv6_prefix", "tls.acme.domains[1]", "tls.acme.challenges[1]", "tls.acme.challenges", "tls.acme.ca"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if err := (edge.Options{HTTP: ":8080"}).Validate(); err != nil {
		t.Errorf("a plain listener: %v", err)
	}
}
