package subject

import (
	"net/http"
	"net/netip"
	"strings"
)

// clientAddr is the address of the client as the gateway believes it: the
// peer, or, when the peer is a trusted proxy, the right-most address of the
// forwarded header that is not itself a trusted proxy.
func (r *Resolver) clientAddr(req *http.Request, peer netip.Addr, peerTrusted bool) netip.Addr {
	if !peerTrusted {
		return peer
	}
	client := peer
	// Several field lines are one list; walk it from the right, where the
	// hops we trust wrote, and stop at the first hop we do not trust.
	lines := req.Header[r.forwardedHeader]
	for i := len(lines) - 1; i >= 0; i-- {
		list := lines[i]
		for list != "" {
			var hop string
			if j := strings.LastIndexByte(list, ','); j >= 0 {
				hop, list = list[j+1:], list[:j]
			} else {
				hop, list = list, ""
			}
			hop = strings.TrimSpace(hop)
			if hop == "" {
				continue
			}
			var addr netip.Addr
			var ok bool
			if r.forwardedHeader == "Forwarded" {
				addr, ok = parseForwardedFor(hop)
			} else {
				addr, ok = parseHop(hop)
			}
			if !ok {
				// A trusted hop wrote something that is not an address: the
				// last hop we could read stands for the client.
				return client
			}
			client = addr
			if !r.trusts(addr) {
				return client
			}
		}
	}
	return client
}

// parseForwardedFor reads the for= parameter of one RFC 7239 Forwarded
// element: a bare IPv4 address, or a quoted string holding an address with
// a port or an IPv6 address in brackets ("[2001:db8::17]:4711"). Obfuscated
// and "unknown" nodes are not addresses.
func parseForwardedFor(element string) (netip.Addr, bool) {
	for pair := range strings.SplitSeq(element, ";") {
		name, value, found := strings.Cut(strings.TrimSpace(pair), "=")
		if !found || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		if strings.HasPrefix(value, "[") {
			end := strings.IndexByte(value, ']')
			if end < 0 {
				return netip.Addr{}, false
			}
			rest := value[end+1:]
			if rest != "" && (rest[0] != ':' || len(rest) == 1) {
				return netip.Addr{}, false
			}
			a, err := netip.ParseAddr(value[1:end])
			if err != nil || !a.Is6() {
				return netip.Addr{}, false
			}
			return a.Unmap(), true
		}
		return parseHop(value)
	}
	return netip.Addr{}, false
}

func parseHop(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}
