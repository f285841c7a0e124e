package subject_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/subject"
)

// A jwt block's rules are subject's: each problem names its field as the
// block does, and NewResolver refuses the options for the same reasons.
func TestJWTOptionsValidateNamesTheFieldOfEachProblem(t *testing.T) {
	o := subject.JWTOptions{JWKSURL: "http://keys.example.com/jwks.json", Issuer: " ", Audience: []string{"orders", ""},
		Algorithms: []string{"RS256", "HS256", "none", "ES999", "RS256"}, Leeway: subject.MaxLeeway + time.Second}
	fields := problemFields(t, o.Validate())
	want := []string{"jwks_url", "issuer", "audience[1]", "algorithms[1]", "algorithms[2]", "algorithms[3]", "algorithms[4]", "leeway"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	var fe *option.Error
	if err := (&subject.JWTOptions{}).Validate(); !errors.As(err, &fe) || fe.Field != "jwks_file" {
		t.Errorf("no key set: %v", err)
	}
	if _, err := subject.NewResolver(subject.Options{JWT: &o, PseudonymKeys: map[int][]byte{1: []byte("test-only-fake-hmac-secret-0123456789abcdef")}, PseudonymVersion: 1}); !errors.As(err, &fe) {
		t.Errorf("NewResolver took options Validate refuses: %v", err)
	}
	ok := subject.JWTOptions{JWKSURL: "http://127.0.0.1:8081/jwks.json", Issuer: "https://idp.example/", Audience: []string{"orders"}, Algorithms: []string{"ES256"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("keys from this machine: %v", err)
	}
}

// The pseudonym keys' rules are subject's: versions from 1, secrets long
// enough, a key of the active version; NewPseudonymizer refuses the same.
func TestValidatePseudonymKeysNamesTheFieldOfEachProblem(t *testing.T) {
	secret := []byte("test-only-fake-hmac-secret-0123456789abcdef")
	keys := map[int][]byte{-1: secret, 1: secret, 2: []byte("short")}
	var fields []string
	for _, e := range subject.ValidatePseudonymKeys(keys, 3).(interface{ Unwrap() []error }).Unwrap() {
		fields = append(fields, e.(*option.Error).Field)
	}
	if want := []string{"key.-1", "key.2.secret", "version"}; !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	if _, err := subject.NewPseudonymizer(keys, 1); err == nil {
		t.Error("NewPseudonymizer took keys ValidatePseudonymKeys refuses")
	}
	if err := subject.ValidatePseudonymKeys(map[int][]byte{1: secret}, 1); err != nil {
		t.Errorf("one key, active: %v", err)
	}
	// An active version below 1 is refused as such, with or without a
	// key of that version.
	for _, active := range []int{0, -1} {
		errs := subject.ValidatePseudonymKeys(map[int][]byte{-1: secret, 1: secret}, active).(interface{ Unwrap() []error }).Unwrap()
		if last := errs[len(errs)-1].(*option.Error); last.Field != "version" || last.Summary != "Value too small" {
			t.Errorf("version %d: %+v", active, last)
		}
	}
}

// The subject block's header names are subject's rule too, and a jwt
// block's header and claims: each set one that is no header name, or a
// blank claim, is named by its field, and NewResolver refuses them.
func TestOptionsValidateNamesEachHeaderAndClaim(t *testing.T) {
	o := subject.Options{ForwardedHeader: "X Forwarded For", PrincipalHeader: " ", APIKeyHeader: "X-API-Key:", PlanHeader: "X-Plan"}
	fields := problemFields(t, o.Validate())
	if want := []string{"forwarded_header", "principal_header", "api_key_header"}; !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	var fe *option.Error
	keys := map[int][]byte{1: []byte("test-only-fake-hmac-secret-0123456789abcdef")}
	if _, err := subject.NewResolver(subject.Options{PlanHeader: "X Plan", PseudonymKeys: keys, PseudonymVersion: 1}); !errors.As(err, &fe) || fe.Field != "plan_header" {
		t.Errorf("NewResolver took a plan header that is no header name: %v", err)
	}
	if err := (&subject.Options{}).Validate(); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	j := subject.JWTOptions{JWKSURL: "https://idp.example/jwks.json", Issuer: "https://idp.example/", Audience: []string{"orders"},
		Algorithms: []string{"ES256"}, Header: "X Token", Claim: " ", PlanClaim: "\t", MaxTokenBytes: -1}
	fields = problemFields(t, j.Validate())
	if want := []string{"header", "claim", "plan_claim", "max_token_bytes"}; !slices.Equal(fields, want) {
		t.Errorf("jwt fields %q, want %q", fields, want)
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

// An IPv6 prefix that is set is 1 to 128, named by its field; zero is the
// default. NewResolver refuses what Validate does.
func TestOptionsValidateHoldsTheIPv6PrefixToItsRange(t *testing.T) {
	for _, bits := range []int{-1, 129} {
		o := subject.Options{IPv6Prefix: bits}
		if fields := problemFields(t, o.Validate()); !slices.Equal(fields, []string{"ipv6_prefix"}) {
			t.Errorf("ipv6_prefix %d: fields %q", bits, fields)
		}
		o.PseudonymKeys, o.PseudonymVersion = map[int][]byte{1: []byte(fakeSecret)}, 1
		if _, err := subject.NewResolver(o); err == nil {
			t.Errorf("NewResolver took ipv6_prefix %d", bits)
		}
	}
	for _, bits := range []int{0, 1, 128} {
		o := subject.Options{IPv6Prefix: bits, PseudonymKeys: map[int][]byte{1: []byte(fakeSecret)}, PseudonymVersion: 1}
		if _, err := subject.NewResolver(o); err != nil {
			t.Errorf("ipv6_prefix %d: %v", bits, err)
		}
	}
}
