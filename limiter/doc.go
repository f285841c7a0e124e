// Package limiter decides whether a request may go on. It is split into how
// to decide (the algorithms in algorithm.go: fixed window, sliding counter,
// token bucket and concurrency, pure functions of a stored state and a
// clock) and where counters live (the in-process Memory backend and the
// Redis backend, whose Lua scripts in package lua mirror the same
// arithmetic). Every backend answers with a sealed Outcome: Evaluated,
// Unavailable, Indeterminate or Incompatible; the conformance suite in
// limitertest holds each backend to the same behaviour. The package knows
// nothing of HTTP.
//
// A route's or plan's policies are compiled once, at load, into a
// PolicySet, which each Request names: as envoyproxy/ratelimit builds its
// descriptor tree at load and Caddy provisions a module once, the request
// path then holds only ready, immutable state, and a backend keys what it
// keeps per list of policies (remembered denials, leases of budget) by the
// set itself. What may follow an admission (releasing or renewing its
// leases, giving back a delayed place) is carried by its outcome
// (Evaluated.Admitted), as an http.Response carries its Body's Close, so
// that Backend stays small as features grow.
//
// The files layer as packages would, as envoyproxy/ratelimit's backends
// sit over its shared types: the types and rules every backend shares at
// the bottom (policy, outcome, the algorithms, the PolicySet and its
// script arguments, delays, leases), each backend above them in files of
// its own prefix (memory_*, redis_* and the Redis path's batcher, breaker,
// denials and leases of budget), neither naming the other's, and what puts
// backends together on top (fallback, observed, open).
// TestFilesOfThePackageLayerOneWay holds them to it.
package limiter
