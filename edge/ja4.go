package edge

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"slices"
	"strconv"
)

// JA4 is the JA4 fingerprint of a ClientHello, as FoxIO's specification
// defines it: "t" (TLS over TCP) or "q" (QUIC), the highest TLS version
// offered, "d" with an SNI extension or "i" without, the counts of cipher
// suites and extensions (two digits, at most 99), the first and last
// characters of the first ALPN value; then the first 12 hex digits of the
// SHA-256 of the cipher suites sorted, and of the extensions sorted less
// SNI and ALPN, followed by the signature algorithms as sent. GREASE values
// are ignored everywhere. Many clients share one fingerprint: every
// browser of a version, every program built on one TLS library.
func JA4(quic bool, hello *tls.ClientHelloInfo) string {
	b := make([]byte, 0, 36)
	b = append(b, 't')
	if quic {
		b[0] = 'q'
	}
	b = append(b, ja4Version(hello.SupportedVersions)...)
	if slices.Contains(hello.Extensions, extensionServerName) {
		b = append(b, 'd')
	} else {
		b = append(b, 'i')
	}
	ciphers := withoutGREASE(hello.CipherSuites)
	extensions := withoutGREASE(hello.Extensions)
	b = appendCount(b, len(ciphers))
	b = appendCount(b, len(extensions))
	b = appendALPN(b, hello.SupportedProtos)
	b = append(b, '_')
	slices.Sort(ciphers)
	b = appendTruncatedHash(b, hexList(nil, ciphers), len(ciphers) == 0)
	b = append(b, '_')
	extensions = slices.DeleteFunc(extensions, func(e uint16) bool { return e == extensionServerName || e == extensionALPN })
	slices.Sort(extensions)
	text := hexList(nil, extensions)
	schemes := make([]uint16, 0, len(hello.SignatureSchemes))
	for _, s := range hello.SignatureSchemes {
		if !isGREASE(uint16(s)) {
			schemes = append(schemes, uint16(s))
		}
	}
	if len(schemes) > 0 {
		text = append(text, '_')
		text = hexList(text, schemes)
	}
	return string(appendTruncatedHash(b, text, len(extensions) == 0))
}

// Extension types JA4 reads apart.
const (
	extensionServerName uint16 = 0x0000
	extensionALPN       uint16 = 0x0010
)

// isGREASE reports whether v is one of the reserved values of RFC 8701:
// 0x0a0a, 0x1a1a, ... 0xfafa.
func isGREASE(v uint16) bool { return v&0x0f0f == 0x0a0a && v>>8 == v&0xff }

func withoutGREASE(values []uint16) []uint16 {
	out := make([]uint16, 0, len(values))
	for _, v := range values {
		if !isGREASE(v) {
			out = append(out, v)
		}
	}
	return out
}

// ja4Version is the highest version offered, GREASE aside. Go fills
// SupportedVersions from the legacy version field when the
// supported_versions extension is absent, as JA4 reads it then.
func ja4Version(versions []uint16) string {
	var highest uint16
	for _, v := range versions {
		if !isGREASE(v) && v > highest {
			highest = v
		}
	}
	switch highest {
	case tls.VersionTLS13:
		return "13"
	case tls.VersionTLS12:
		return "12"
	case tls.VersionTLS11:
		return "11"
	case tls.VersionTLS10:
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

// appendALPN appends the first and last characters of the first protocol,
// "00" without one, and the first and last hex digits of its bytes when
// either end is not a letter or digit.
func appendALPN(b []byte, protos []string) []byte {
	if len(protos) == 0 || protos[0] == "" {
		return append(b, "00"...)
	}
	p := protos[0]
	first, last := p[0], p[len(p)-1]
	if isAlphanumeric(first) && isAlphanumeric(last) {
		return append(b, first, last)
	}
	const digits = "0123456789abcdef"
	return append(b, digits[first>>4], digits[last&0x0f])
}

func isAlphanumeric(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z'
}

// hexList appends values as four lower-case hex digits each, comma
// separated.
func hexList(b []byte, values []uint16) []byte {
	for i, v := range values {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, hexDigits(v)...)
	}
	return b
}

func hexDigits(v uint16) []byte {
	var out [4]byte
	hex.Encode(out[:], []byte{byte(v >> 8), byte(v)})
	return out[:]
}

// appendTruncatedHash appends the first 12 hex digits of text's SHA-256,
// or twelve zeros when the list it hashes is empty.
func appendTruncatedHash(b, text []byte, empty bool) []byte {
	if empty {
		return append(b, "000000000000"...)
	}
	sum := sha256.Sum256(text)
	return hex.AppendEncode(b, sum[:6])
}
