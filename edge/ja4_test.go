package edge_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/edgegate/gateway/edge"
)

// hexValues reads "1301,1302" as the values it lists.
func hexValues(t testing.TB, list string) []uint16 {
	t.Helper()
	var out []uint16
	for _, h := range strings.Split(list, ",") {
		if h == "" {
			continue
		}
		v, err := strconv.ParseUint(h, 16, 16)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, uint16(v))
	}
	return out
}

// The published vectors: the example of FoxIO's JA4 specification (the
// ClientHello as sent, with its fingerprint with and without signature
// algorithms), and a Chrome ClientHello published with its JA4_ro (the
// fields in the order sent) and its JA4. GREASE values are put into the
// lists where a browser puts them: they must change nothing.
func TestJA4PublishedVectors(t *testing.T) {
	specCiphers := "1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035"
	specExtensions := "001b,0000,0033,0010,4469,0017,002d,000d,0005,0023,0012,002b,ff01,000b,000a,0015"
	signatures := "0403,0804,0401,0503,0805,0501,0806,0601"
	chromeExtensions := "002d,0033,0010,fe0d,0017,44cd,0000,000b,000a,002b,ff01,0023,0012,0005,000d,001b"
	for _, c := range []struct {
		name                                  string
		ciphers, extensions, signatures, want string
	}{
		{"the specification's example", specCiphers, specExtensions, signatures, "t13d1516h2_8daaf6152771_e5627efa2ab1"},
		{"the example without signature algorithms", specCiphers, specExtensions, "", "t13d1516h2_8daaf6152771_6d807ffa2a79"},
		{"the example with GREASE", "0a0a," + specCiphers, "fafa," + specExtensions + ",1a1a", "6a6a," + signatures, "t13d1516h2_8daaf6152771_e5627efa2ab1"},
		{"a published Chrome hello", specCiphers, chromeExtensions, signatures, "t13d1516h2_8daaf6152771_d8a2da3f94cd"},
		{"the Chrome hello with GREASE", "2a2a," + specCiphers, "3a3a," + chromeExtensions + ",dada", signatures, "t13d1516h2_8daaf6152771_d8a2da3f94cd"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := edge.JA4Of(false, []uint16{0x7a7a, 0x0304, 0x0303}, hexValues(t, c.ciphers), hexValues(t, c.extensions), hexValues(t, c.signatures), []string{"h2", "http/1.1"})
			if got != c.want {
				t.Fatalf("JA4 %s, want %s", got, c.want)
			}
		})
	}
}

// The first part of the fingerprint, field by field, as the
// specification words each rule.
func TestJA4FirstPart(t *testing.T) {
	ciphers := []uint16{0x1301}
	for _, c := range []struct {
		name       string
		quic       bool
		versions   []uint16
		ciphers    []uint16
		extensions []uint16
		alpn       []string
		want       string
	}{
		{"QUIC", true, []uint16{0x0304}, ciphers, []uint16{0x0000}, []string{"h3"}, "q13d0101h3"},
		{"no SNI, TLS 1.2, http/1.1", false, []uint16{0x0303}, ciphers, nil, []string{"http/1.1"}, "t12i0100h1"},
		{"no ALPN", false, []uint16{0x0303, 0x0302}, ciphers, nil, nil, "t12i010000"},
		{"an empty first ALPN", false, []uint16{0x0301}, ciphers, nil, []string{"", "h2"}, "t10i010000"},
		{"one character", false, []uint16{0x0300}, ciphers, nil, []string{"x"}, "ts3i0100xx"},
		{"a non-alphanumeric byte: 0xab", false, nil, ciphers, nil, []string{"\xab"}, "t00i0100ab"},
		{"0xab 0xcd", false, []uint16{0xfefd}, ciphers, nil, []string{"\xab\xcd"}, "td2i0100ad"},
		{"0x30 0xab", false, []uint16{0x0002}, ciphers, nil, []string{"0\xab"}, "ts2i01003b"},
		{"0x30 0x31 0xab 0xcd", false, []uint16{0x0304}, ciphers, nil, []string{"01\xab\xcd"}, "t13i01003d"},
		{"0x30 0xab 0xcd 0x31", false, []uint16{0x0304}, ciphers, nil, []string{"0\xab\xcd1"}, "t13i010001"},
		{"only GREASE versions", false, []uint16{0x0a0a}, ciphers, nil, nil, "t00i010000"},
		{"an unknown version", false, []uint16{0x0305}, ciphers, nil, nil, "t00i010000"},
		{"more than 99 ciphers", false, []uint16{0x0304}, make([]uint16, 150), make([]uint16, 120), nil, "t13d999900"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := edge.JA4Of(c.quic, c.versions, c.ciphers, c.extensions, nil, c.alpn)
			if first, _, _ := strings.Cut(got, "_"); first != c.want {
				t.Fatalf("first part %s, want %s (%s)", first, c.want, got)
			}
		})
	}
	if got := edge.JA4Of(false, nil, nil, []uint16{0x0000, 0x0010}, []uint16{0x0403}, nil); got != "t00d000200_000000000000_000000000000" {
		t.Fatalf("no ciphers, only SNI and ALPN: %s", got)
	}
}

// FuzzJA4 fingerprints ClientHellos of any fields: the fingerprint is
// always 36 characters in three parts, GREASE values anywhere change
// nothing, and the order of ciphers and extensions does not matter.
func FuzzJA4(f *testing.F) {
	f.Add(false, []byte{0x03, 0x04}, []byte{0x13, 0x01, 0x0a, 0x0a}, []byte{0x00, 0x00, 0x00, 0x10, 0xfa, 0xfa}, []byte{0x04, 0x03}, "h2")
	f.Add(true, []byte{}, []byte{}, []byte{0xff}, []byte{0x0a}, "\xff\x00")
	f.Fuzz(func(t *testing.T, quic bool, versions, ciphers, extensions, signatures []byte, alpn string) {
		v, c, e, s := u16s(versions), u16s(ciphers), u16s(extensions), u16s(signatures)
		got := edge.JA4Of(quic, v, c, e, s, []string{alpn})
		parts := strings.Split(got, "_")
		if len(got) != 36 || len(parts) != 3 || len(parts[0]) != 10 {
			t.Fatalf("malformed fingerprint %q", got)
		}
		greased := edge.JA4Of(quic, append([]uint16{0x1a1a}, v...), append(c, 0xeaea), append([]uint16{0x0a0a}, e...), append(s, 0x2a2a), []string{alpn})
		if greased != got {
			t.Fatalf("GREASE changed %s into %s", got, greased)
		}
		reversed := edge.JA4Of(quic, v, reverse(c), reverse(e), s, []string{alpn})
		if reversed != got {
			t.Fatalf("order changed %s into %s", got, reversed)
		}
	})
}

func u16s(b []byte) []uint16 {
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = uint16(b[2*i])<<8 | uint16(b[2*i+1])
	}
	return out
}

func reverse(v []uint16) []uint16 {
	out := make([]uint16, len(v))
	for i, x := range v {
		out[len(v)-1-i] = x
	}
	return out
}
