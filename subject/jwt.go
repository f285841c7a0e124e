package subject

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/golang-jwt/jwt/v5"
)

// JWTOptions configures the jwt source: a bearer token whose signature,
// issuer, audience and lifetime are checked, and whose Claim names the
// principal.
type JWTOptions struct {
	// Header carries the token. Default Authorization, where only the
	// Bearer scheme counts; another header may hold the token bare or
	// after "Bearer ".
	Header string
	// Keys verify the signature.
	Keys KeySet
	// JWKSURL is where Keys are fetched from, when they are: the caller
	// owns the fetching, which outlives a reload, and sets Keys from it.
	// NewResolver reads Keys only.
	JWKSURL string
	// Issuer must equal the token's iss.
	Issuer string
	// Audience: the token's aud must hold at least one of these.
	Audience []string
	// Claim is the principal. Default "sub".
	Claim string
	// PlanClaim, when set, names the claim that holds the principal's plan
	// (a string). A token without it has no plan; it is not refused.
	PlanClaim string
	// Leeway forgives clock skew on exp, nbf and iat.
	Leeway time.Duration
	// Algorithms are the JWS algorithms accepted, from Algorithms.
	Algorithms []string
	// CacheEntries bounds the cache of verified tokens. Default 8192.
	CacheEntries int
	// MaxTokenBytes: a longer token is refused (too_large) before any of
	// it is decoded. Default DefaultMaxTokenBytes.
	MaxTokenBytes int
	// Now is the clock tokens are checked against. Default time.Now.
	Now func() time.Time
}

// ErrInvalidToken is what Resolve's error wraps when a token was presented
// and failed verification; the error is a *TokenError that says why.
var ErrInvalidToken = errors.New("invalid token")

// TokenError is a failed verification. Its reason is one of a fixed set of
// words, safe for logs and metrics: it never quotes the token or a claim.
type TokenError struct {
	Reason string
}

func (e *TokenError) Error() string { return "invalid token: " + e.Reason }
func (e *TokenError) Unwrap() error { return ErrInvalidToken }

// The reasons a token is refused.
var (
	tokenMalformed    = &TokenError{"malformed"}
	tokenAlgorithm    = &TokenError{"algorithm_not_allowed"}
	tokenUnknownKey   = &TokenError{"unknown_key"}
	tokenBadSignature = &TokenError{"bad_signature"}
	tokenExpired      = &TokenError{"expired"}
	tokenNotYetValid  = &TokenError{"not_yet_valid"}
	tokenIssuer       = &TokenError{"wrong_issuer"}
	tokenAudience     = &TokenError{"wrong_audience"}
	tokenMissingClaim = &TokenError{"missing_claim"}
	tokenInvalid      = &TokenError{"invalid_claims"}
	tokenTooLarge     = &TokenError{"too_large"}
	tokenIssuedLater  = &TokenError{"issued_in_future"}
)

// DefaultMaxTokenBytes is JWTOptions.MaxTokenBytes's default: tokens of
// the common providers are well under 2 KiB.
const DefaultMaxTokenBytes = 8192

// maxHeaderBytes bounds the decoded JOSE header, which is read before the
// signature is checked: a real one is a hundred bytes (alg, kid, typ).
const maxHeaderBytes = 1024

// maxSignatureBytes bounds a signature: an 8192-bit RSA key's is 1024.
const maxSignatureBytes = 1024

// tokenClaims is what a verified token says, as far as the gateway reads
// it. A claim the gateway comes to need (a plan, say) is one more field,
// read in claimsOf.
type tokenClaims struct {
	principal string
	plan      string // "" without a plan claim
}

// verifier checks tokens and remembers the ones that passed.
type verifier struct {
	header     string
	bearerOnly bool
	keys       KeySet
	claim      string
	planClaim  string
	methods    map[string]jwt.SigningMethod // by alg, the allowed ones only
	leeway     time.Duration
	maxBytes   int
	now        func() time.Time
	validator  *jwt.Validator
	cache      tokenCache
}

// Defaults of JWTOptions.
const (
	DefaultJWTHeader = "Authorization"
	DefaultJWTClaim  = "sub"
)

func newVerifier(o JWTOptions) (*verifier, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("jwt: %w", err)
	}
	// A JWKSURL stands for the keys until the caller fetched them.
	if o.Keys == nil {
		return nil, errors.New("jwt: no key set")
	}
	if o.Header == "" {
		o.Header = DefaultJWTHeader
	}
	if o.Claim == "" {
		o.Claim = DefaultJWTClaim
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = 8192
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxTokenBytes <= 0 {
		o.MaxTokenBytes = DefaultMaxTokenBytes
	}
	methods := map[string]jwt.SigningMethod{}
	for _, a := range o.Algorithms {
		methods[a] = jwt.GetSigningMethod(a)
	}
	header := http.CanonicalHeaderKey(o.Header)
	return &verifier{
		header:     header,
		bearerOnly: header == "Authorization",
		keys:       o.Keys,
		claim:      o.Claim,
		planClaim:  o.PlanClaim,
		methods:    methods,
		leeway:     o.Leeway,
		maxBytes:   o.MaxTokenBytes,
		now:        o.Now,
		validator: jwt.NewValidator(
			jwt.WithIssuer(o.Issuer),
			jwt.WithAudience(o.Audience...),
			jwt.WithLeeway(o.Leeway),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithTimeFunc(o.Now),
		),
		cache: newTokenCache(o.CacheEntries),
	}, nil
}

// token returns the token a request presents. No header, or an
// Authorization header of another scheme, is no token: the next source
// decides. A Bearer scheme with nothing after it is a malformed token.
func (v *verifier) token(req *http.Request) (string, bool) {
	values := req.Header[v.header]
	if len(values) == 0 {
		return "", false
	}
	s := strings.TrimSpace(values[0])
	if s == "" {
		return "", false
	}
	if len(s) >= 6 && strings.EqualFold(s[:6], "bearer") && (len(s) == 6 || s[6] == ' ' || s[6] == '\t') {
		return strings.TrimSpace(s[6:]), true
	}
	if v.bearerOnly {
		return "", false
	}
	return s, true
}

// verify checks raw and returns its claims. A token verified before, under
// the same generation of the key set and still within its lifetime, is
// taken from the cache without a signature check. Otherwise gate, when not
// nil, is asked first (see TokenGate).
//
// The order keeps a forged token cheap: its length is checked before
// anything is decoded; then only its small header is decoded, to find the
// key by kid and alg; the signature over header.payload is checked before
// the payload is decoded, so what a key holder did not sign is never
// parsed. Only then are the claims read.
func (v *verifier) verify(ctx context.Context, raw string, gate func() error) (tokenClaims, error) {
	if raw == "" {
		return tokenClaims{}, tokenMalformed
	}
	if len(raw) > v.maxBytes {
		return tokenClaims{}, tokenTooLarge
	}
	sum := tokenSum(raw)
	now := v.now()
	if c, ok := v.cache.get(&sum, now); ok && c.generation == v.keys.generation() {
		return c.claims, nil
	}
	if gate != nil {
		if err := gate(); err != nil {
			return tokenClaims{}, err
		}
	}

	headerEnd := strings.IndexByte(raw, '.')
	signedEnd := strings.LastIndexByte(raw, '.')
	if headerEnd < 0 || signedEnd == headerEnd || strings.IndexByte(raw[headerEnd+1:signedEnd], '.') >= 0 {
		return tokenClaims{}, tokenMalformed // not three segments (a JWE has five)
	}
	alg, kid, err := v.readHeader(raw[:headerEnd])
	if err != nil {
		return tokenClaims{}, err
	}
	k, generation, err := v.keys.lookup(ctx, kid, alg)
	switch {
	case errors.Is(err, errUnknownKey):
		return tokenClaims{}, tokenUnknownKey
	case err != nil:
		return tokenClaims{}, err // ErrKeysUnavailable: the gateway cannot decide
	}
	sigSegment := raw[signedEnd+1:]
	if base64.RawURLEncoding.DecodedLen(len(sigSegment)) > maxSignatureBytes {
		return tokenClaims{}, tokenBadSignature
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigSegment)
	if err != nil {
		return tokenClaims{}, tokenMalformed
	}
	if v.methods[alg].Verify(raw[:signedEnd], sig, k.key) != nil {
		return tokenClaims{}, tokenBadSignature
	}

	claims, err := decodeClaims(raw[headerEnd+1 : signedEnd])
	if err != nil {
		return tokenClaims{}, tokenMalformed
	}
	if err := v.validator.Validate(claims); err != nil {
		return tokenClaims{}, classifyClaims(err)
	}
	out, ok := claimsOf(claims, v.claim, v.planClaim)
	if !ok {
		return tokenClaims{}, tokenMissingClaim
	}
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		v.cache.put(&cachedToken{sum: sum, claims: out, generation: generation, until: exp.Add(v.leeway)})
	}
	return out, nil
}

// joseHeader is what the gateway reads of a token's header. Kid stays raw
// so that a kid of another type than string is told from a missing one.
type joseHeader struct {
	Alg  string          `json:"alg"`
	Kid  json.RawMessage `json:"kid"`
	Crit json.RawMessage `json:"crit"`
}

// readHeader decodes a token's header segment, at most maxHeaderBytes, and
// returns its algorithm, one the verifier allows, and its key ID.
func (v *verifier) readHeader(segment string) (alg, kid string, err error) {
	if base64.RawURLEncoding.DecodedLen(len(segment)) > maxHeaderBytes {
		return "", "", tokenMalformed
	}
	var buf [maxHeaderBytes]byte
	n, err := base64.RawURLEncoding.Decode(buf[:], unsafe.Slice(unsafe.StringData(segment), len(segment)))
	if err != nil {
		return "", "", tokenMalformed
	}
	var h joseHeader
	if json.Unmarshal(buf[:n], &h) != nil {
		return "", "", tokenMalformed
	}
	if h.Crit != nil {
		// RFC 7515 4.1.11: extensions the gateway does not know must
		// not be ignored.
		return "", "", tokenMalformed
	}
	if h.Kid != nil {
		if string(h.Kid) == "null" || json.Unmarshal(h.Kid, &kid) != nil {
			return "", "", tokenMalformed // a kid that is not a string
		}
	}
	if _, ok := v.methods[h.Alg]; !ok {
		return "", "", tokenAlgorithm
	}
	return h.Alg, kid, nil
}

// decodeClaims decodes a payload whose signature was verified; numbers
// stay json.Number, so a numeric principal keeps its digits.
func decodeClaims(segment string) (jwt.MapClaims, error) {
	b, err := base64.RawURLEncoding.DecodeString(segment)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var claims jwt.MapClaims
	if err := d.Decode(&claims); err != nil {
		return nil, err
	}
	if claims == nil {
		return nil, errors.New("payload is null")
	}
	return claims, nil
}

// classifyClaims maps the validator's error to the reason a client's
// token is refused.
func classifyClaims(err error) error {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return tokenExpired
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return tokenNotYetValid
	case errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return tokenIssuedLater
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return tokenIssuer
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return tokenAudience
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return tokenMissingClaim
	}
	return tokenInvalid
}

// claimsOf reads the claims the gateway uses. The principal is a string
// or a number (some providers number their users), never empty. The plan,
// when planClaim is set, is a string; any other value is no plan.
func claimsOf(m jwt.MapClaims, principalClaim, planClaim string) (tokenClaims, bool) {
	p, ok := claimString(m, principalClaim)
	if !ok {
		return tokenClaims{}, false
	}
	c := tokenClaims{principal: p}
	if planClaim != "" {
		c.plan, _ = m[planClaim].(string)
	}
	return c, true
}

func claimString(m jwt.MapClaims, name string) (string, bool) {
	switch v := m[name].(type) {
	case string:
		return v, v != ""
	case json.Number:
		return v.String(), true
	}
	return "", false
}

// tokenSum hashes a token without copying it: SHA-256 reads its input and
// keeps none of it, so a read-only view of the string's bytes is safe.
func tokenSum(raw string) [sha256.Size]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(raw), len(raw)))
}

// tokenCache remembers verified tokens by the SHA-256 of the token. It is
// direct-mapped: each hash has one slot, a newer token evicts an older
// one that shares it, so it is bounded and a lookup takes no lock.
type tokenCache struct {
	slots []atomic.Pointer[cachedToken]
	mask  uint64
}

type cachedToken struct {
	sum        [sha256.Size]byte
	claims     tokenClaims
	generation uint64
	until      time.Time // exp plus leeway
}

func newTokenCache(entries int) tokenCache {
	n := 1
	for n < entries {
		n <<= 1
	}
	return tokenCache{slots: make([]atomic.Pointer[cachedToken], n), mask: uint64(n - 1)}
}

func (c *tokenCache) slot(sum *[sha256.Size]byte) *atomic.Pointer[cachedToken] {
	return &c.slots[binary.LittleEndian.Uint64(sum[:8])&c.mask]
}

func (c *tokenCache) get(sum *[sha256.Size]byte, now time.Time) (*cachedToken, bool) {
	e := c.slot(sum).Load()
	if e == nil || e.sum != *sum || !now.Before(e.until) {
		return nil, false
	}
	return e, true
}

func (c *tokenCache) put(e *cachedToken) {
	c.slot(&e.sum).Store(e)
}
