package subject_test

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/edgegate/gateway/subject"
)

var fuzzTrusted = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.1/32"),
	netip.MustParsePrefix("2001:db8:ffff::/48"),
}

// FuzzForwardedFor checks which address the client_ip source counts for a
// request from peer that carries the X-Forwarded-For field lines in
// forwarded (one line per "\n"): from an untrusted peer the peer, whatever
// the header says; from a trusted one, the right-most readable hop that is
// not a trusted proxy. A hop a trusted proxy wrote that is no address ends
// the walk: the last hop read so far, the peer at first, stands for the
// client. When every hop is trusted, the left-most one does.
func FuzzForwardedFor(f *testing.F) {
	for _, seed := range []struct{ peer, forwarded string }{
		{"203.0.113.7:5000", "198.51.100.1"},
		{"10.1.1.1:5000", "203.0.113.7"},
		{"10.1.1.1:5000", "198.51.100.99, 203.0.113.7"},
		{"10.1.1.1:5000", "198.51.100.99\n203.0.113.7, 10.2.2.2"},
		{"10.1.1.1:5000", "203.0.113.7, garbage, 10.2.2.2"},
		{"10.1.1.1:5000", "203.0.113.7, 10.2.2.2, garbage"},
		{"10.1.1.1:5000", "10.3.3.3, 10.2.2.2"},
		{"10.1.1.1:5000", " , ,\n\n"},
		{"10.1.1.1:5000", "[2001:db8::1]:443, 203.0.113.7:80, ::ffff:10.9.9.9"},
		{"[2001:db8:ffff::1]:5000", "2001:db8:1:2::1, 2001:db8:ffff::2"},
		{"[::ffff:10.1.1.1]:5000", "fe80::1%eth0"},
		{"127.0.0.1:80", "1.2.3.4:99999, 1.2.3.4"},
		{"not an address", "203.0.113.7"},
	} {
		f.Add(seed.peer, seed.forwarded)
	}

	keys := map[int][]byte{1: []byte(fakeSecret)}
	resolver, err := subject.NewResolver(subject.Options{TrustedProxies: fuzzTrusted, PseudonymKeys: keys, PseudonymVersion: 1})
	if err != nil {
		f.Fatal(err)
	}
	// direct resolves what a client at an address is, with nobody trusted.
	direct, err := subject.NewResolver(subject.Options{PseudonymKeys: keys, PseudonymVersion: 1})
	if err != nil {
		f.Fatal(err)
	}
	pseudonymOf := func(t *testing.T, a netip.Addr) subject.Subject {
		t.Helper()
		s, err := direct.Resolve(request(netip.AddrPortFrom(a, 1).String()), subject.Query{Sources: []subject.Kind{subject.ClientIP}, OperationID: "op"})
		if err != nil {
			t.Fatalf("address %s: %v", a, err)
		}
		return s
	}
	sources := []subject.Kind{subject.ClientIP}

	f.Fuzz(func(t *testing.T, peer, forwarded string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = peer
		for line := range strings.SplitSeq(forwarded, "\n") {
			req.Header.Add("X-Forwarded-For", line)
		}
		got, err := resolver.Resolve(req, subject.Query{Sources: sources, OperationID: "op"})

		peerAddr, perr := netip.ParseAddrPort(peer)
		want := peerAddr.Addr().Unmap()
		if perr == nil && trusted(want) {
			want = forwardedClient(want, req.Header.Values("X-Forwarded-For"))
		}
		if perr != nil {
			if !errors.Is(err, subject.ErrUnidentified) {
				t.Fatalf("peer %q is no address, yet Resolve gave %+v, %v", peer, got, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("peer %q, X-Forwarded-For %q: %v", peer, forwarded, err)
		}
		if w := pseudonymOf(t, want); got != w {
			t.Fatalf("peer %q, X-Forwarded-For %q: counted as someone other than %s", peer, forwarded, want)
		}
	})
}

func trusted(a netip.Addr) bool {
	return slices.ContainsFunc(fuzzTrusted, func(p netip.Prefix) bool { return p.Contains(a) })
}

// forwardedClient is the rule of FuzzForwardedFor, walked the plain way:
// every hop of every line, right to left.
func forwardedClient(peer netip.Addr, lines []string) netip.Addr {
	var hops []string
	for _, line := range lines {
		hops = append(hops, strings.Split(line, ",")...)
	}
	client := peer
	for _, hop := range slices.Backward(hops) {
		hop = strings.TrimSpace(hop)
		if hop == "" {
			continue
		}
		a, ok := readHop(hop)
		if !ok {
			return client
		}
		client = a
		if !trusted(a) {
			return client
		}
	}
	return client
}

// readHop reads an address, with or without a port; an IPv4 address in
// IPv6 form is the IPv4 address.
func readHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}
