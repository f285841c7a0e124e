package subject_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgegate/gateway/subject"
	"github.com/edgegate/gateway/subject/jwttest"
)

// FuzzJWT sends any Authorization value to a resolver whose key set signed
// exactly one token, alice's. Whatever the value, Resolve does not panic,
// and it either identifies alice (the token itself, or a spelling of the
// header that carries it), falls through to the address (no bearer token),
// or refuses the token as invalid: no forged value ever names anyone else.
func FuzzJWT(f *testing.F) {
	c := newClock()
	k := jwttest.EC(f, "e1")
	r := jwtResolver(f, jwtOptions(staticKeys(f, k), c.Now))
	alice := k.Sign(f, jwttest.Claims("alice", c.Now().Add(time.Hour)))
	want, err := r.Resolve(bearer(alice), subject.Query{Sources: jwtFirst, OperationID: "op"})
	if err != nil {
		f.Fatal(err)
	}
	address, err := r.Resolve(request("203.0.113.7:5000"), subject.Query{Sources: jwtFirst, OperationID: "op"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("Bearer " + alice)
	for _, tok := range jwttest.Invalid(f, k, jwttest.EC(f, "e2"), c.Now()) {
		f.Add("Bearer " + tok)
	}
	f.Add("Basic YWxhZGRpbjpvcGVuc2VzYW1l")
	f.Add("bearer\t" + strings.ToUpper(alice))
	f.Fuzz(func(t *testing.T, authorization string) {
		s, err := r.Resolve(request("203.0.113.7:5000", "Authorization", authorization), subject.Query{Sources: jwtFirst, OperationID: "op"})
		switch {
		case errors.Is(err, subject.ErrInvalidToken):
		case err != nil:
			t.Fatalf("%q: %v", authorization, err)
		case s.Kind == subject.JWT && s != want:
			t.Fatalf("%q identified someone other than alice", authorization)
		case s.Kind == subject.ClientIP && s != address:
			t.Fatalf("%q moved the address", authorization)
		case s.Kind != subject.JWT && s.Kind != subject.ClientIP:
			t.Fatalf("%q: kind %v", authorization, s.Kind)
		}
	})
}
