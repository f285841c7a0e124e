// Package jwttest makes signing keys, key sets and tokens for tests. Every
// key is generated when the test runs; no private key is ever written down.
package jwttest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Key is a signing key and the name it has in a key set.
type Key struct {
	ID      string
	Alg     string
	Private crypto.Signer
}

// RSA returns a 2048-bit RSA key for RS256.
func RSA(t testing.TB, kid string) *Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{ID: kid, Alg: "RS256", Private: k}
}

// EC returns a P-256 key for ES256.
func EC(t testing.TB, kid string) *Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{ID: kid, Alg: "ES256", Private: k}
}

// Ed25519 returns a key for EdDSA.
func Ed25519(t testing.TB, kid string) *Key {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Key{ID: kid, Alg: "EdDSA", Private: k}
}

// JWKS is the public JWK Set of keys.
func JWKS(keys ...*Key) []byte {
	set := struct {
		Keys []map[string]string `json:"keys"`
	}{Keys: []map[string]string{}}
	b64 := base64.RawURLEncoding.EncodeToString
	for _, k := range keys {
		m := map[string]string{"use": "sig"}
		if k.ID != "" {
			m["kid"] = k.ID
		}
		switch p := k.Private.Public().(type) {
		case *rsa.PublicKey:
			m["kty"], m["n"], m["e"] = "RSA", b64(p.N.Bytes()), b64(big.NewInt(int64(p.E)).Bytes())
		case *ecdsa.PublicKey:
			size := (p.Curve.Params().BitSize + 7) / 8
			raw, _ := p.Bytes()
			m["kty"], m["crv"] = "EC", p.Curve.Params().Name
			m["x"], m["y"] = b64(raw[1:1+size]), b64(raw[1+size:])
		case ed25519.PublicKey:
			m["kty"], m["crv"], m["x"] = "OKP", "Ed25519", b64(p)
		}
		set.Keys = append(set.Keys, m)
	}
	b, _ := json.Marshal(set)
	return b
}

// Claims are the claims of a token that passes a verifier expecting
// issuer "https://idp.test/" and audience "orders-api", for sub, expiring
// at exp.
func Claims(sub string, exp time.Time) jwt.MapClaims {
	return jwt.MapClaims{"iss": "https://idp.test/", "aud": "orders-api", "sub": sub, "exp": exp.Unix()}
}

// Sign signs claims with k, naming k.ID as the kid when there is one.
func (k *Key) Sign(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	return k.SignWithHeader(t, nil, claims)
}

// SignWithHeader signs claims with k, with extra header parameters.
func (k *Key) SignWithHeader(t testing.TB, header map[string]any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.GetSigningMethod(k.Alg), claims)
	if k.ID != "" {
		tok.Header["kid"] = k.ID
	}
	for name, v := range header {
		tok.Header[name] = v
	}
	s, err := tok.SignedString(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// SignRaw signs a header and payload given as they are, JSON or not: the
// tokens a forger or a broken provider makes.
func (k *Key) SignRaw(t testing.TB, header, payload []byte) string {
	t.Helper()
	b64 := base64.RawURLEncoding.EncodeToString
	signing := b64(header) + "." + b64(payload)
	sig, err := jwt.GetSigningMethod(k.Alg).Sign(signing, k.Private)
	if err != nil {
		t.Fatal(err)
	}
	return signing + "." + b64(sig)
}

// Junk is a token of n bytes or a little more whose payload is the JSON
// array [1,1,1,...], under a header naming kid and alg, with a signature
// of the right length that verifies nothing: what a client sends to make
// a verifier parse as much as it can.
func Junk(n int, alg, kid string) string {
	b64 := base64.RawURLEncoding.EncodeToString
	header := b64([]byte(`{"alg":"` + alg + `","kid":"` + kid + `"}`))
	sig := b64(make([]byte, 256))
	items := (n - len(header) - len(sig)) * 3 / 4 / 2
	payload := "[" + strings.Repeat("1,", max(items, 1)-1) + "1]"
	return header + "." + b64([]byte(payload)) + "." + sig
}

// Invalid returns one token for each way a token fails, by name, against a
// verifier that holds good (and not stranger) and accepts the claims of
// Claims at now with a leeway under a minute. They are signed by good unless
// their name says otherwise.
func Invalid(t testing.TB, good, stranger *Key, now time.Time) map[string]string {
	exp := now.Add(time.Hour)
	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		c := Claims("alice", exp)
		edit(c)
		return c
	}
	valid := good.Sign(t, Claims("alice", exp))
	parts := strings.Split(valid, ".")
	b64 := base64.RawURLEncoding.EncodeToString
	forgedHeader := b64([]byte(`{"alg":"ES256","kid":"` + good.ID + `"}`))
	return map[string]string{
		"bad_signature":             parts[0] + "." + parts[1] + "." + b64(make([]byte, 64)),
		"claims swapped":            forgedHeader + "." + b64([]byte(`{"iss":"https://idp.test/","aud":"orders-api","sub":"mallory","exp":9999999999}`)) + "." + parts[2],
		"alg none":                  b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + parts[1] + ".",
		"alg none with kid":         b64([]byte(`{"alg":"none","kid":"`+good.ID+`"}`)) + "." + parts[1] + ".",
		"algorithm not listed":      hmacToken(t, good.ID, Claims("alice", exp)),
		"expired":                   good.Sign(t, claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-2 * time.Minute).Unix() })),
		"not yet valid":             good.Sign(t, claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(2 * time.Minute).Unix() })),
		"no exp":                    good.Sign(t, claims(func(c jwt.MapClaims) { delete(c, "exp") })),
		"wrong issuer":              good.Sign(t, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" })),
		"wrong audience":            good.Sign(t, claims(func(c jwt.MapClaims) { c["aud"] = "billing-api" })),
		"no audience":               good.Sign(t, claims(func(c jwt.MapClaims) { delete(c, "aud") })),
		"its own key in the header": stranger.SignWithHeader(t, map[string]any{"jwk": embedded(stranger), "jku": "https://evil.test/jwks.json"}, Claims("alice", exp)),
		"unknown kid":               stranger.Sign(t, Claims("alice", exp)),
		"a stranger's key":          (&Key{ID: good.ID, Alg: stranger.Alg, Private: stranger.Private}).Sign(t, Claims("alice", exp)),
		"missing claim":             good.Sign(t, claims(func(c jwt.MapClaims) { delete(c, "sub") })),
		"empty claim":               good.Sign(t, claims(func(c jwt.MapClaims) { c["sub"] = "" })),
		"claim not a string":        good.Sign(t, claims(func(c jwt.MapClaims) { c["sub"] = map[string]any{"id": 1} })),
		"crit header":               good.SignWithHeader(t, map[string]any{"crit": []string{"exp"}}, Claims("alice", exp)),
		"malformed":                 "not-a-token",
		"two segments":              parts[0] + "." + parts[1],
		"bad base64":                parts[0] + ".!!!." + parts[2],
		"bearer with no token":      "",
		"exp not a number":          good.Sign(t, claims(func(c jwt.MapClaims) { c["exp"] = "tomorrow" })),
		"JWE-shaped (5 parts)":      valid + ".x.y",
		"signature of another":      parts[0] + "." + parts[1] + "." + strings.Split(good.Sign(t, Claims("bob", exp)), ".")[2],
		"header not JSON":           b64([]byte("nope")) + "." + parts[1] + "." + parts[2],
		"issuer as a list":          good.Sign(t, claims(func(c jwt.MapClaims) { c["iss"] = []string{"https://idp.test/"} })),
		"first character cut":       " " + valid[1:],
		"kid not a string":          good.SignRaw(t, []byte(`{"alg":"`+good.Alg+`","kid":5}`), []byte(parts[1])),
		"kid null":                  good.SignRaw(t, []byte(`{"alg":"`+good.Alg+`","kid":null}`), []byte(parts[1])),
		"issued in the future":      good.Sign(t, claims(func(c jwt.MapClaims) { c["iat"] = now.Add(2 * time.Minute).Unix() })),
		"payload not JSON":          good.SignRaw(t, []byte(`{"alg":"`+good.Alg+`","kid":"`+good.ID+`"}`), []byte("[1,1,1]")),
		"payload null":              good.SignRaw(t, []byte(`{"alg":"`+good.Alg+`","kid":"`+good.ID+`"}`), []byte("null")),
		"longer than 8192 bytes":    good.Sign(t, claims(func(c jwt.MapClaims) { c["pad"] = strings.Repeat("x", 8192) })),
		"junk, 16 KiB, unknown kid": Junk(16<<10, good.Alg, "nobody"),
		"junk, 6 KiB, known kid":    Junk(6<<10, good.Alg, good.ID),
	}
}

// embedded is k's public JWK, as an attacker puts it in a token's header.
func embedded(k *Key) map[string]any {
	var set struct{ Keys []map[string]any }
	json.Unmarshal(JWKS(k), &set)
	return set.Keys[0]
}

// hmacToken is an HS256 token whose secret is the kid: what an attacker
// signs when a verifier would take a public key as an HMAC secret.
func hmacToken(t testing.TB, kid string, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString([]byte(kid))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
