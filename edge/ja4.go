package edge

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"slices"
	"strconv"
)

// The JA4 fingerprint of a TLS ClientHello, as FoxIO's JA4 specification
// defines it: "t13d1516h2_8daaf6152771_e5627efa2ab1". Its first part is
// the transport (t for TLS over TCP, q for QUIC), the highest TLS version
// offered, d or i for an SNI extension or none, the numbers of cipher
// suites and extensions (at most 99), and the first and last characters of
// the first ALPN protocol; the second the first 12 hex digits of the
// SHA-256 of the cipher suites, sorted; the third those of the extensions,
// sorted, without SNI and ALPN, then the signature algorithms as offered.
// GREASE values count nowhere.
//
// Many clients send the same ClientHello: a fingerprint names a TLS
// library and its settings (every curl of one build, every Chrome of one
// version), never one client.

// helloFields is what the fingerprint reads of a ClientHello, as
// crypto/tls hands it over in tls.ClientHelloInfo.
type helloFields struct {
	quic       bool
	versions   []uint16 // supported_versions, or the legacy version alone
	ciphers    []uint16
	extensions []uint16 // in the order sent
	signatures []uint16 // signature_algorithms, in the order sent
	alpn       []string
}

func helloFieldsOf(hello *tls.ClientHelloInfo, quic bool) helloFields {
	h := helloFields{quic: quic, versions: hello.SupportedVersions, ciphers: hello.CipherSuites,
		extensions: hello.Extensions, alpn: hello.SupportedProtos}
	h.signatures = make([]uint16, len(hello.SignatureSchemes))
	for i, s := range hello.SignatureSchemes {
		h.signatures[i] = uint16(s)
	}
	return h
}

// isGREASE reports whether v is one of the reserved values of RFC 8701
// (0x0a0a, 0x1a1a, … 0xfafa) that clients send to keep servers honest.
func isGREASE(v uint16) bool {
	return v&0x0f0f == 0x0a0a && v>>8 == v&0xff
}

const (
	extensionSNI  = 0x0000
	extensionALPN = 0x0010
)

// ja4 is the fingerprint of h.
func ja4(h helloFields) string {
	ciphers := withoutGREASE(h.ciphers)
	extensions := withoutGREASE(h.extensions)
	b := make([]byte, 0, 36)
	if h.quic {
		b = append(b, 'q')
	} else {
		b = append(b, 't')
	}
	b = append(b, versionCode(withoutGREASE(h.versions))...)
	if slices.Contains(extensions, extensionSNI) {
		b = append(b, 'd')
	} else {
		b = append(b, 'i')
	}
	b = appendCount(b, len(ciphers))
	b = appendCount(b, len(extensions))
	b = appendALPN(b, h.alpn)
	b = append(b, '_')
	slices.Sort(ciphers)
	b = appendHash(b, hexList(nil, ciphers))
	b = append(b, '_')
	hashed := slices.DeleteFunc(extensions, func(e uint16) bool { return e == extensionSNI || e == extensionALPN })
	slices.Sort(hashed)
	var list []byte
	if len(hashed) > 0 {
		list = hexList(nil, hashed)
		if signatures := withoutGREASE(h.signatures); len(signatures) > 0 {
			list = hexList(append(list, '_'), signatures)
		}
	}
	return string(appendHash(b, list))
}

// withoutGREASE is a copy of values without the GREASE ones.
func withoutGREASE(values []uint16) []uint16 {
	out := make([]uint16, 0, len(values))
	for _, v := range values {
		if !isGREASE(v) {
			out = append(out, v)
		}
	}
	return out
}

// versionCode is the two characters of the highest version offered.
func versionCode(versions []uint16) string {
	if len(versions) == 0 {
		return "00"
	}
	switch slices.Max(versions) {
	case 0x0304:
		return "13"
	case 0x0303:
		return "12"
	case 0x0302:
		return "11"
	case 0x0301:
		return "10"
	case 0x0300:
		return "s3"
	case 0x0002:
		return "s2"
	case 0xfeff:
		return "d1"
	case 0xfefd:
		return "d2"
	case 0xfefc:
		return "d3"
	}
	return "00"
}

func appendCount(b []byte, n int) []byte {
	n = min(n, 99)
	if n < 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, int64(n), 10)
}

// appendALPN appends the first and last characters of the first ALPN
// protocol, "00" for none or an empty one; when either is not a letter or
// a digit, the first and last hex digits of the whole value instead.
func appendALPN(b []byte, alpn []string) []byte {
	if len(alpn) == 0 || alpn[0] == "" {
		return append(b, "00"...)
	}
	first, last := alpn[0][0], alpn[0][len(alpn[0])-1]
	if isAlphanumeric(first) && isAlphanumeric(last) {
		return append(b, first, last)
	}
	h := hex.EncodeToString([]byte(alpn[0]))
	return append(b, h[0], h[len(h)-1])
}

func isAlphanumeric(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// hexList appends values as four lower-case hex digits each, separated
// by commas.
func hexList(b []byte, values []uint16) []byte {
	for i, v := range values {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, hex.EncodeToString([]byte{byte(v >> 8), byte(v)})...)
	}
	return b
}

// appendHash appends the first 12 hex digits of list's SHA-256, or
// twelve zeros for an empty list.
func appendHash(b, list []byte) []byte {
	if len(list) == 0 {
		return append(b, "000000000000"...)
	}
	sum := sha256.Sum256(list)
	return append(b, hex.EncodeToString(sum[:6])...)
}

// fingerprintKey is the context key of a connection's *fingerprint.
type fingerprintKey struct{}

// fingerprint is where a connection's JA4 is written by the handshake
// (recordFingerprint) and read by its requests (JA4). The handshake ends
// before the connection is handed to the server, so no request reads it
// while it is written.
type fingerprint struct{ ja4 string }

// withFingerprint is ctx carrying f, for the handshake to fill and the
// connection's requests to read.
func withFingerprint(ctx context.Context, f *fingerprint) context.Context {
	return context.WithValue(ctx, fingerprintKey{}, f)
}

// JA4 is the JA4 fingerprint of the ClientHello of the connection a
// request came on: "" for a connection without TLS. It is no secret of the
// client's (anyone on the path sees it) and no identity of one: many
// clients share one fingerprint.
func JA4(ctx context.Context) string {
	if f, ok := ctx.Value(fingerprintKey{}).(*fingerprint); ok {
		return f.ja4
	}
	return ""
}

// recordFingerprints wraps cfg's GetConfigForClient, which crypto/tls
// calls first with every ClientHello, so that it writes the hello's
// fingerprint where the handshake's context says (withFingerprint).
// quic marks the fingerprints of a QUIC listener's handshakes.
func recordFingerprints(cfg *tls.Config, quic bool) {
	next := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if f, ok := hello.Context().Value(fingerprintKey{}).(*fingerprint); ok {
			f.ja4 = ja4(helloFieldsOf(hello, quic))
		}
		if next == nil {
			return nil, nil
		}
		return next(hello)
	}
}
