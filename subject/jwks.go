package subject

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
)

// Algorithms are the JWS algorithms a jwt block may allow: the public-key
// ones only. HMAC algorithms would need a shared secret, which a JWKS does
// not (and must not) publish; "none" is never a signature.
var Algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// MinRSABits is the smallest RSA modulus a key set may hold; smaller keys
// are skipped.
const MinRSABits = 2048

// publicKey is one verification key of a set, with what it may verify.
type publicKey struct {
	kid string
	alg string // the key's own "alg", or "" for any algorithm its type fits
	key any    // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
}

// fits reports whether k may verify a token signed with alg.
func (k *publicKey) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch key := k.key.(type) {
	case *rsa.PublicKey:
		return alg[0] == 'R' || alg[0] == 'P'
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return key.Curve == elliptic.P256()
		case "ES384":
			return key.Curve == elliptic.P384()
		case "ES512":
			return key.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// keySnapshot is an immutable set of keys by key ID; keys without a "kid"
// are in unnamed.
type keySnapshot struct {
	byID    map[string]*publicKey
	unnamed []*publicKey
}

// find returns the key that may verify a token with this kid and alg. A
// token without a kid is verified only when exactly one key of the set fits
// its algorithm: trying every key would let one forged token cost many
// signature checks.
func (s *keySnapshot) find(kid, alg string) (*publicKey, bool) {
	if s == nil {
		return nil, false
	}
	if kid != "" {
		k, ok := s.byID[kid]
		return k, ok && k.fits(alg)
	}
	var found *publicKey
	for _, k := range s.all() {
		if k.fits(alg) {
			if found != nil {
				return nil, false
			}
			found = k
		}
	}
	return found, found != nil
}

func (s *keySnapshot) all() []*publicKey {
	keys := slices.Clone(s.unnamed)
	for _, k := range s.byID {
		keys = append(keys, k)
	}
	return keys
}

// jwk is one JSON Web Key (RFC 7517) as far as a verifier reads it.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	Crv string `json:"crv"`
	N   string `json:"n"`
	E   string `json:"e"`
	X   string `json:"x"`
	Y   string `json:"y"`
	// Private parts: their presence is an error, never read.
	D  *json.RawMessage `json:"d"`
	P  *json.RawMessage `json:"p"`
	Q  *json.RawMessage `json:"q"`
	K  *json.RawMessage `json:"k"`
	DP *json.RawMessage `json:"dp"`
}

// errPrivateKey: a key set that holds private key material was published
// or stored by mistake, and is refused whole rather than half-trusted.
var errPrivateKey = errors.New("the key set holds private key material; publish public keys only")

// parseJWKS reads a JWK Set. Keys of a type or use the gateway does not
// verify with (symmetric keys, encryption keys, RSA under MinRSABits,
// unknown curves) are skipped, so an identity provider that adds one does
// not break the set; a set with no usable key, a repeated key ID or any
// private key material is refused.
func parseJWKS(src []byte) (*keySnapshot, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(src, &set); err != nil {
		return nil, fmt.Errorf("not a JWK Set: %w", err)
	}
	s := &keySnapshot{byID: map[string]*publicKey{}}
	for i, k := range set.Keys {
		if k.D != nil || k.P != nil || k.Q != nil || k.K != nil || k.DP != nil {
			return nil, fmt.Errorf("key %d: %w", i, errPrivateKey)
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if k.Alg != "" && !slices.Contains(Algorithms, k.Alg) {
			continue
		}
		key, err := k.publicKey()
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i, k.Kid, err)
		}
		if key == nil {
			continue
		}
		pk := &publicKey{kid: k.Kid, alg: k.Alg, key: key}
		if k.Kid == "" {
			s.unnamed = append(s.unnamed, pk)
			continue
		}
		if _, dup := s.byID[k.Kid]; dup {
			return nil, fmt.Errorf("key ID %q appears twice", k.Kid)
		}
		s.byID[k.Kid] = pk
	}
	if len(s.byID)+len(s.unnamed) == 0 {
		return nil, errors.New("the key set holds no RSA (2048 bits or more), EC P-256/384/521 or Ed25519 signing key")
	}
	return s, nil
}

// publicKey decodes k; nil without an error for a key type the gateway
// skips.
func (k *jwk) publicKey() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err := b64int(k.N)
		if err != nil {
			return nil, fmt.Errorf("n: %w", err)
		}
		e, err := b64int(k.E)
		if err != nil {
			return nil, fmt.Errorf("e: %w", err)
		}
		if !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 || e.Bit(0) == 0 {
			return nil, errors.New("e is not a usable RSA exponent")
		}
		if n.BitLen() < MinRSABits {
			return nil, nil
		}
		return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, nil
		}
		size := (curve.Params().BitSize + 7) / 8
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != size {
			return nil, errors.New("x is not a coordinate of the curve")
		}
		y, err := base64.RawURLEncoding.DecodeString(k.Y)
		if err != nil || len(y) != size {
			return nil, errors.New("y is not a coordinate of the curve")
		}
		point := append(append([]byte{4}, x...), y...)
		key, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, fmt.Errorf("not a point of %s: %w", k.Crv, err)
		}
		return key, nil
	case "OKP":
		if k.Crv != "Ed25519" {
			return nil, nil
		}
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if err != nil || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("x is not an Ed25519 public key")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, nil
}

func b64int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, errors.New("not a base64url integer")
	}
	return new(big.Int).SetBytes(b), nil
}
