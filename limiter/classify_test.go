package limiter_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/edgegate/gateway/limiter"
)

// reply is an error reply as go-redis hands it over: an error that is also
// a redis.Error.
type reply string

func (r reply) Error() string { return string(r) }
func (reply) RedisError()     {}

func TestRedisErrorRepliesAreClassifiedByCause(t *testing.T) {
	unavailable := []struct{ reply, cause string }{
		{"NOSCRIPT No matching script. Please use EVAL.", "noscript"},
		{"NOPERM User gateway has no permissions to run the 'evalsha' command", "noperm"},
		{"NOAUTH Authentication required.", "auth"},
		{"WRONGPASS invalid username-password pair or user is disabled.", "auth"},
		{"LOADING Redis is loading the dataset in memory", "loading"},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", "masterdown"},
		{"READONLY You can't write against a read only replica.", "readonly"},
		{"CLUSTERDOWN The cluster is down", "clusterdown"},
		{"MOVED 3999 127.0.0.1:6381", "moved"},
		{"ASK 3999 127.0.0.1:6381", "ask"},
		{"TRYAGAIN Multiple keys request during rehashing of slot", "tryagain"},
		{"OOM command not allowed when used memory > 'maxmemory'.", "oom"},
		{"NOREPLICAS Not enough good replicas to write.", "noreplicas"},
		{"BUSY Redis is busy running a script.", "busy"},
		{"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", "misconf"},
	}
	for _, c := range unavailable {
		t.Run(c.cause+" refuses before the script runs", func(t *testing.T) {
			cause, o := limiter.ClassifyRedisError(reply(c.reply))
			if u, ok := o.(limiter.Unavailable); !ok || u.Category != limiter.UnavailableBeforeSend || cause != c.cause {
				t.Fatalf("%q: cause %q outcome %#v, want %q Unavailable before send", c.reply, cause, o, c.cause)
			}
		})
	}
	t.Run("a script error may have run part of the script", func(t *testing.T) {
		if cause, o := limiter.ClassifyRedisError(reply("ERR user_script:1: attempt to compare nil with number")); cause != "script" {
			t.Fatalf("cause %q outcome %#v, want script Indeterminate", cause, o)
		} else if _, ok := o.(limiter.Indeterminate); !ok {
			t.Fatalf("outcome %#v, want Indeterminate", o)
		}
	})
	for _, c := range []struct{ name, reply, cause string }{
		{"NOAUTH inside a script (Redis 6)", "ERR Error running script (call to f_3b0c5a): @user_script:12: @user_script: 12: -NOAUTH Authentication required.", "auth"},
		{"NOPERM inside a script (Redis 6)", "ERR Error running script (call to f_3b0c5a): @user_script:12: @user_script: 12: -NOPERM this user has no permissions to run the 'get' command", "noperm"},
		{"an ACL refusal inside a script (Redis 7)", "ERR The user executing the script can't run this command or subcommand script: d3c21d0c2b9ca22f82737626a27bcaf5d288f99f, on @user_script:1.", "noperm"},
	} {
		t.Run(c.name+" is counted as "+c.cause+", not script", func(t *testing.T) {
			cause, o := limiter.ClassifyRedisError(reply(c.reply))
			if cause != c.cause {
				t.Fatalf("cause %q, want %q", cause, c.cause)
			}
			// The script may have run in part: not a refusal before it ran.
			if _, ok := o.(limiter.Indeterminate); !ok {
				t.Fatalf("outcome %#v, want Indeterminate", o)
			}
		})
	}
	t.Run("a reply that only starts like a code is not that code", func(t *testing.T) {
		if cause, _ := limiter.ClassifyRedisError(reply("BUSYKEY Target key name already exists.")); cause == "busy" {
			t.Fatal("BUSYKEY classified as busy")
		}
	})
	t.Run("a wrong type is incompatible state", func(t *testing.T) {
		if _, o := limiter.ClassifyRedisError(reply("WRONGTYPE Operation against a key holding the wrong kind of value")); o == nil {
			t.Fatal("no outcome")
		} else if _, ok := o.(limiter.Incompatible); !ok {
			t.Fatalf("outcome %#v, want Incompatible", o)
		}
	})
}

// Every cause an error is counted under is one gateway_redis_errors_total
// exports at 0 from the start.
func TestEveryRedisErrorCauseIsDeclared(t *testing.T) {
	errs := []error{
		redis.ErrPoolTimeout, redis.ErrClosed, limiter.ErrNotSent, limiter.ErrCircuitOpen,
		&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, reply("WRONGTYPE Operation against a key holding the wrong kind of value"),
		reply("ERR user_script:1: attempt to compare nil with number"), context.DeadlineExceeded, os.ErrDeadlineExceeded,
		io.EOF, errors.New("something else"),
		reply("ERR Error running script (call to f_3b0c5a): @user_script:12: @user_script: 12: -NOAUTH Authentication required."),
		reply("MOVED 3999 127.0.0.1:6381"), reply("ASK 3999 127.0.0.1:6381"),
	}
	for _, code := range []string{"NOSCRIPT", "NOPERM", "NOAUTH", "LOADING", "MASTERDOWN", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "OOM", "NOREPLICAS", "ERR max number of clients reached", "BUSY", "MISCONF"} {
		errs = append(errs, reply(code+" x"))
	}
	declared := limiter.RedisErrorCauses()
	seen := map[string]bool{}
	for _, err := range errs {
		cause, _ := limiter.ClassifyRedisError(err)
		seen[cause] = true
		if !slices.Contains(declared, cause) {
			t.Errorf("%v is counted under cause %q, which is not declared", err, cause)
		}
	}
	for _, cause := range declared {
		if !seen[cause] {
			t.Errorf("cause %q is declared, and no error here is counted under it", cause)
		}
	}
}
