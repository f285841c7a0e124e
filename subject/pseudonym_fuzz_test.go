package subject_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"

	"github.com/edgegate/gateway/subject"
)

// FuzzPseudonymFraming checks that no two subjects share a pseudonym: the
// second tuple moves the boundary between identity and operation ID
// (combined split at i and at j), or names another kind, or both. Each
// pseudonym is also the documented HMAC of the length-framed fields, and
// the same on a second signing, after the pool has lent its buffers to
// another subject.
func FuzzPseudonymFraming(f *testing.F) {
	f.Add(uint8(0), uint8(0), "abc", uint(1), uint(2))
	f.Add(uint8(0), uint8(1), "203.0.113.7op", uint(11), uint(11))
	f.Add(uint8(2), uint8(2), "", uint(0), uint(0))
	f.Add(uint8(1), uint8(2), "\x00\x00\x00\x01a", uint(0), uint(5))
	f.Add(uint8(2), uint8(0), "client_ip\x00\x00\x00\x02op", uint(9), uint(0))

	secret := []byte(fakeSecret)
	p, err := subject.NewPseudonymizer(map[int][]byte{3: secret}, 3)
	if err != nil {
		f.Fatal(err)
	}
	kinds := []subject.Kind{subject.Principal, subject.APIKey, subject.ClientIP}

	f.Fuzz(func(t *testing.T, k1, k2 uint8, combined string, i, j uint) {
		i, j = i%uint(len(combined)+1), j%uint(len(combined)+1)
		kind1, kind2 := kinds[int(k1)%len(kinds)], kinds[int(k2)%len(kinds)]
		id1, op1 := combined[:i], combined[i:]
		id2, op2 := combined[:j], combined[j:]

		a := p.Pseudonym(kind1, id1, op1)
		b := p.Pseudonym(kind2, id2, op2)
		if want := documented(secret, "v3:", kind1, id1, op1); a != want {
			t.Fatalf("Pseudonym(%v, %q, %q) = %q, want %q", kind1, id1, op1, a, want)
		}
		if again := p.Pseudonym(kind1, id1, op1); again != a {
			t.Fatalf("Pseudonym(%v, %q, %q) is %q, then %q", kind1, id1, op1, a, again)
		}
		if same := kind1 == kind2 && i == j; (a == b) != same {
			t.Fatalf("(%v, %q, %q) and (%v, %q, %q): pseudonyms %q and %q", kind1, id1, op1, kind2, id2, op2, a, b)
		}
	})
}

// documented is the pseudonym as Pseudonymizer documents it: the version
// prefix, then the hex HMAC-SHA256 of each field preceded by its length in
// four big-endian bytes.
func documented(secret []byte, prefix string, kind subject.Kind, identity, operationID string) string {
	mac := hmac.New(sha256.New, secret)
	for _, field := range []string{kind.String(), identity, operationID} {
		mac.Write(binary.BigEndian.AppendUint32(nil, uint32(len(field))))
		mac.Write([]byte(field))
	}
	return prefix + hex.EncodeToString(mac.Sum(nil))
}
