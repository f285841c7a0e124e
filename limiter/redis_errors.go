package limiter

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// classify maps an error to an outcome by cause. Only errors that prove the
// command was not sent, or did not run, are Unavailable; an error after the
// command may have reached Redis is Indeterminate.
func (r *Redis) classify(err error) Outcome {
	cause, o := classifyRedisError(err)
	r.m.errors.WithLabelValues(cause).Inc()
	return o
}

// redisErrorCauses are every cause classifyRedisError names: the
// refusals' and these. gateway_redis_errors_total exports each at 0 from
// the start, so that a dashboard's panel reads 0 before the first error.
func redisErrorCauses() []string {
	causes := []string{"pool", "closed", "not_sent", "circuit_open", "dial", "wrongtype", "script", "deadline", "timeout", "connection_lost", "other"}
	for _, r := range refusals {
		causes = append(causes, r.cause)
	}
	return causes
}

func classifyRedisError(err error) (string, Outcome) {
	var opErr *net.OpError
	var rerr redis.Error
	switch {
	case errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted):
		return "pool", Unavailable{Category: UnavailableBeforeSend, Err: err}
	case errors.Is(err, redis.ErrClosed):
		return "closed", Unavailable{Category: UnavailableBeforeSend, Err: err}
	case errors.Is(err, errNotSent):
		return "not_sent", Unavailable{Category: UnavailableBeforeSend, Err: err}
	case errors.Is(err, errCircuitOpen):
		return "circuit_open", Unavailable{Category: CircuitOpen, Err: err}
	case errors.As(err, &opErr) && opErr.Op == "dial":
		return "dial", Unavailable{Category: UnavailableBeforeSend, Err: err}
	case errors.As(err, &rerr):
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return "wrongtype", Incompatible{Reason: StateUnreadable, Err: err}
		}
		// Error replies that refuse a command before it runs.
		if cause := refusal(err); cause != "" {
			return cause, Unavailable{Category: UnavailableBeforeSend, Err: err}
		}
		// A refusal of a call inside the script: the script may have run
		// in part, so the outcome stays Indeterminate, but the metric
		// names the cause an operator has to fix.
		if cause := scriptRefusal(rerr.Error()); cause != "" {
			return cause, Indeterminate{Err: err}
		}
		return "script", Indeterminate{Err: err}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return "deadline", Indeterminate{Err: err}
	case isTimeout(err):
		return "timeout", Indeterminate{Err: err}
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return "connection_lost", Indeterminate{Err: err}
	}
	return "other", Indeterminate{Err: err}
}

// refusals are the error replies that prove a command did not run, each
// recognised by go-redis's own predicate where it has one. NOSCRIPT, BUSY
// and MISCONF have none, so those are matched by their reply code.
var refusals = []struct {
	cause string
	is    func(error) bool
}{
	{"noscript", replyCode("NOSCRIPT")},
	{"noperm", redis.IsPermissionError},
	{"auth", redis.IsAuthError},
	{"loading", redis.IsLoadingError},
	{"masterdown", redis.IsMasterDownError},
	{"readonly", redis.IsReadOnlyError},
	{"clusterdown", redis.IsClusterDownError},
	{"moved", func(err error) bool { _, ok := redis.IsMovedError(err); return ok }},
	{"ask", func(err error) bool { _, ok := redis.IsAskError(err); return ok }},
	{"tryagain", redis.IsTryAgainError},
	{"oom", redis.IsOOMError},
	{"noreplicas", redis.IsNoReplicasError},
	{"maxclients", redis.IsMaxClientsError},
	{"busy", replyCode("BUSY")},
	{"misconf", replyCode("MISCONF")},
}

func replyCode(code string) func(error) bool {
	return func(err error) bool { return redis.HasErrorPrefix(err, code+" ") }
}

// embeddedReply is an error reply found inside a script's error, for the
// refusal predicates.
type embeddedReply string

func (e embeddedReply) Error() string { return string(e) }
func (embeddedReply) RedisError()     {}

// scriptRefusal is the cause of a refusal that a call inside a script met.
// Redis 6 wraps the call's reply in the script's: "ERR Error running script
// (call to f_<sha>): @user_script:1: @user_script: 1: -NOAUTH
// Authentication required."; Redis 7 says an ACL refusal in words: "ERR
// The user executing the script can't run this command or subcommand
// script: <sha>, on @user_script:1." Neither has a typed error in go-redis.
func scriptRefusal(msg string) string {
	if !strings.Contains(msg, "script") {
		return ""
	}
	if i := strings.LastIndex(msg, ": -"); i >= 0 {
		if cause := refusal(embeddedReply(msg[i+3:])); cause != "" {
			return cause
		}
	}
	switch {
	case strings.Contains(msg, "can't run this command"), strings.Contains(msg, "no permissions"),
		strings.Contains(msg, "can't access at least one of the keys"):
		return "noperm"
	case strings.Contains(msg, "Authentication required"):
		return "auth"
	}
	return ""
}

func refusal(err error) string {
	for _, r := range refusals {
		if r.is(err) {
			return r.cause
		}
	}
	return ""
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
