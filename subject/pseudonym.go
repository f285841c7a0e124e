package subject

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"sync"
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

// NewPseudonymizer returns a Pseudonymizer that signs with keys[active].
func NewPseudonymizer(keys map[int][]byte, active int) (*Pseudonymizer, error) {
	if len(keys) == 0 {
		return nil, errors.New("no pseudonym key")
	}
	for v, k := range keys {
		if v < 1 {
			return nil, fmt.Errorf("pseudonym key version %d: versions start at 1", v)
		}
		if len(k) < MinSecretBytes {
			return nil, fmt.Errorf("pseudonym key version %d: secret is %d bytes, at least %d needed", v, len(k), MinSecretBytes)
		}
	}
	key, ok := keys[active]
	if !ok {
		return nil, fmt.Errorf("pseudonym version %d has no key", active)
	}
	key = append([]byte(nil), key...)
	p := &Pseudonymizer{prefix: "v" + strconv.Itoa(active) + ":"}
	p.pool.New = func() any { return hmac.New(sha256.New, key) }
	return p, nil
}

// Pseudonym signs one subject.
func (p *Pseudonymizer) Pseudonym(kind Kind, identity, operationID string) string {
	h := p.pool.Get().(hash.Hash)
	h.Reset()
	var frame [4]byte
	for _, field := range [3]string{kind.String(), identity, operationID} {
		binary.BigEndian.PutUint32(frame[:], uint32(len(field)))
		h.Write(frame[:])
		h.Write([]byte(field))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	p.pool.Put(h)
	var out [8 + 2*sha256.Size]byte
	b := append(out[:0], p.prefix...)
	b = hex.AppendEncode(b, sum[:])
	return string(b)
}
