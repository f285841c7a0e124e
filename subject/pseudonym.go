package subject

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/edgegate/gateway/internal/option"
)

// MinSecretBytes is the shortest HMAC secret accepted.
const MinSecretBytes = 32

// Pseudonymizer turns (kind, canonical identity, operation ID) into a stable
// pseudonym `v<version>:<hex HMAC-SHA256>`. Each field is framed by its
// UTF-8 byte length (four bytes, big-endian) so no two tuples share an input.
//
// Only the active version signs. Older versions stay configured while an
// operator rotates: counters under the old pseudonyms simply age out.
type Pseudonymizer struct {
	prefix string // "v<version>:"
	pool   sync.Pool
}

// signer is one HMAC with the buffers it writes into, lent by the pool so
// that signing allocates only the pseudonym it returns.
type signer struct {
	mac hash.Hash
	in  []byte
	sum [sha256.Size]byte
	out []byte
}

// ValidatePseudonymKeys reports every problem of keys and active, each a
// *option.Error naming the field as a pseudonym block does ("key.2" for a
// key's version, "key.2.secret", "version"), joined: versions from 1,
// secrets of at least MinSecretBytes, and an active version from 1 that
// has a key.
func ValidatePseudonymKeys(keys map[int][]byte, active int) error {
	var errs []error
	for _, v := range slices.Sorted(maps.Keys(keys)) {
		switch {
		case v < 1:
			errs = append(errs, &option.Error{Field: fmt.Sprintf("key.%d", v), Summary: "Invalid key version",
				Detail: "Key versions are whole numbers from 1, such as key \"2\"."})
		case len(keys[v]) < MinSecretBytes:
			errs = append(errs, &option.Error{Field: fmt.Sprintf("key.%d.secret", v), Summary: "HMAC secret too short",
				Detail: fmt.Sprintf("The secret of key %d is %d bytes; at least %d are needed.", v, len(keys[v]), MinSecretBytes)})
		}
	}
	if _, ok := keys[active]; active < 1 {
		errs = append(errs, &option.Error{Field: "version", Summary: "Value too small", Detail: "version must be at least 1."})
	} else if !ok {
		errs = append(errs, &option.Error{Field: "version", Summary: "Pseudonym version without a key",
			Detail: fmt.Sprintf("version = %d, but there is no key \"%d\" block.", active, active)})
	}
	return errors.Join(errs...)
}

// NewPseudonymizer returns a Pseudonymizer that signs with keys[active].
func NewPseudonymizer(keys map[int][]byte, active int) (*Pseudonymizer, error) {
	if err := ValidatePseudonymKeys(keys, active); err != nil {
		return nil, err
	}
	key := keys[active]
	key = append([]byte(nil), key...)
	p := &Pseudonymizer{prefix: "v" + strconv.Itoa(active) + ":"}
	p.pool.New = func() any {
		return &signer{mac: hmac.New(sha256.New, key), in: make([]byte, 0, 256), out: make([]byte, 0, 80)}
	}
	return p, nil
}

// Pseudonym signs one subject.
func (p *Pseudonymizer) Pseudonym(kind Kind, identity, operationID string) string {
	return p.PseudonymWithPlan(kind, identity, operationID, "")
}

// PseudonymWithPlan signs one subject on a plan: the plan is a fourth
// framed field, so a subject whose plan changes starts a budget of its
// own. Without a plan it is Pseudonym: pseudonyms of subjects without a
// plan do not change. Framing keeps a three-field input from ever equalling
// a four-field one.
func (p *Pseudonymizer) PseudonymWithPlan(kind Kind, identity, operationID, plan string) string {
	s := p.pool.Get().(*signer)
	in := s.in[:0]
	fields := [4]string{kind.String(), identity, operationID, plan}
	n := 3
	if plan != "" {
		n = 4
	}
	for _, field := range fields[:n] {
		in = binary.BigEndian.AppendUint32(in, uint32(len(field)))
		in = append(in, field...)
	}
	s.mac.Reset()
	s.mac.Write(in)
	s.mac.Sum(s.sum[:0])
	out := append(s.out[:0], p.prefix...)
	out = hex.AppendEncode(out, s.sum[:])
	pseudonym := string(out)
	if cap(in) <= 4<<10 { // a huge identity is not kept in the pool
		s.in = in
	}
	s.out = out
	p.pool.Put(s)
	return pseudonym
}
