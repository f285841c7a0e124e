package subject

import (
	"errors"
	"net/netip"
	"strings"
)

// fingerprintIdentity is the identity of the ja4 source (the
// fingerprint) or of ja4+client_ip (fingerprint "+" client_ip identity),
// "" when the connection has no fingerprint or, for the pair, the request
// no address. A trusted proxy's connection has none of the client's: its
// fingerprint is the proxy's own, shared by every client behind it.
func (in Inbound) fingerprintIdentity(k Kind) string {
	r := in.r
	if r.fingerprint == nil || in.peerTrusted {
		return ""
	}
	fp := r.fingerprint(in.req.Context())
	if fp == "" || k == JA4 {
		return fp
	}
	addr := r.clientIdentity(in.peer) // an untrusted peer's own address
	if addr == "" {
		return ""
	}
	return fp + "+" + addr
}

// namedFingerprint is the canonical identity of a ja4 or ja4+client_ip
// subject the admin API names: a JA4 fingerprint, for the pair followed by
// "+" and an address ("t13d1516h2_8daaf6152771_e5627efa2ab1+203.0.113.7").
func (r *Resolver) namedFingerprint(kind Kind, identity string) (string, error) {
	fp, addr, pair := strings.Cut(identity, "+")
	if !validJA4(fp) {
		return "", errors.New(kind.String() + ": not a JA4 fingerprint")
	}
	if kind == JA4 {
		if pair {
			return "", errors.New("ja4: a fingerprint alone, with no address")
		}
		return fp, nil
	}
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return "", errors.New("ja4+client_ip: FINGERPRINT+ADDRESS, the address an IP address")
	}
	return fp + "+" + r.clientIdentity(a.Unmap()), nil
}

// validJA4 reports whether s has the form of a JA4 fingerprint: ten
// characters, then twice "_" and twelve lower-case hex digits.
func validJA4(s string) bool {
	if len(s) != 36 || s[10] != '_' || s[23] != '_' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case i == 10 || i == 23:
		case i < 10 && ('0' <= c && c <= '9' || 'a' <= c && c <= 'z'):
		case i > 10 && ('0' <= c && c <= '9' || 'a' <= c && c <= 'f'):
		default:
			return false
		}
	}
	return true
}
