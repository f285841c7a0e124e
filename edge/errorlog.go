package edge

import (
	"log"
	"log/slog"
	"net/netip"
	"strings"
)

// NewErrorLog is the ErrorLog for an http.Server or a ReverseProxy: each
// line goes to logger at Warn with every IP address in it, with or without
// a port, replaced by "[address]". net/http and its HTTP/2 server name the
// client in their complaints ("connection error from 203.0.113.7:52138"),
// and no raw client address may reach a log line.
func NewErrorLog(logger *slog.Logger) *log.Logger {
	return log.New(redactingWriter{logger}, "", 0)
}

type redactingWriter struct{ logger *slog.Logger }

func (w redactingWriter) Write(p []byte) (int, error) {
	w.logger.Warn(RedactAddresses(strings.TrimSuffix(string(p), "\n")))
	return len(p), nil
}

// RedactAddresses replaces every IPv4 or IPv6 address in s, with its port
// if it has one ("192.0.2.1:80", "[2001:db8::1]:443", "::1"), by
// "[address]". Words that merely look like hex ("beef", "cafe:") stay.
func RedactAddresses(s string) string {
	var b strings.Builder
	start := 0 // of the text not yet copied
	for i := 0; i < len(s); {
		if !addressByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && addressByte(s[j]) {
			j++
		}
		// A run may end in punctuation of the sentence ("from ::1: EOF").
		end := j
		for end > i && (s[end-1] == ':' || s[end-1] == '.') {
			end--
		}
		if isAddress(s[i:end]) {
			b.WriteString(s[start:i])
			b.WriteString("[address]")
			start = end
		}
		i = j
	}
	if start == 0 {
		return s
	}
	b.WriteString(s[start:])
	return b.String()
}

func addressByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == ':' || c == '.' || c == '[' || c == ']' || c == '%'
}

func isAddress(s string) bool {
	if !strings.ContainsAny(s, ".:") {
		return false
	}
	if _, err := netip.ParseAddrPort(s); err == nil {
		return true
	}
	_, err := netip.ParseAddr(strings.Trim(s, "[]"))
	return err == nil
}
