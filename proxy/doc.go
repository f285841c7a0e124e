// Package proxy is the request path: route, identify, limit, forward.
//
// A request is decided before anything reaches the upstream: only an
// Evaluated, allowed outcome is forwarded, and to a pool with an overload
// block only once its controller gives the request a slot (overload.go).
// The configuration the request path
// reads is compiled once and swapped atomically on reload; a request keeps
// the configuration it started with.
package proxy
