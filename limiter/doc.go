// Package limiter decides whether a request may go on. It is split into how
// to decide (the three algorithms in algorithm.go, pure functions of a stored
// state and a clock) and where counters live (the in-process Memory backend
// and the Redis backend, whose Lua scripts in package lua mirror the same
// arithmetic). Every backend answers with a sealed Outcome: Evaluated,
// Unavailable, Indeterminate or Incompatible; the conformance suite in
// limitertest holds each backend to the same behaviour. The package knows
// nothing of HTTP.
package limiter
