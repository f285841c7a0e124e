// Package edge is what faces the internet in front of the request path:
// TLS termination (static certificates and ACME through certmagic), the
// plain-HTTP redirect, HSTS, and the connection and framing limits of the
// listeners.
package edge
