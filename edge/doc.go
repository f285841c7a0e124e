// Package edge is what faces the internet in front of the request path:
// the public listeners and the admin one, TLS termination (static
// certificates and ACME through certmagic, client certificates for mutual
// TLS), HTTP/3 over QUIC on the HTTPS port (quic-go), the plain-HTTP
// redirect, HSTS, and the connection and framing limits of the listeners.
// A public listener's HTTP/1.1 requests without a body take a fast path of
// its own (fastServer); every other request is net/http's.
//
// Listen turns Options into bound listeners and ready servers, with every
// protection already wired: callers hand in handlers and get no way to serve
// a public listener without them. Serve starts them, SwapCertificates
// replaces the static certificates on reload and SwapClientCAs the roots of
// client certificates, Shutdown drains and stops everything edge started.
package edge
