package limiter

import (
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/edgegate/gateway/lua"
)

type script struct {
	name string
	src  string
	sha  string
}

// EVALSHA's arguments before the keys: the command, the script's SHA and
// the number of keys.
const cmdHead = 3

// command starts an EVALSHA of s over keys, with room for n arguments to
// be appended after them: the command as go-redis writes it (Do), made
// once for every try of a call. The SHA and the keys are boxed as
// pointers, which costs no allocation; keys must not change after.
func (s *script) command(keys []string, n int) []any {
	cmd := newCommand(cmdHead + len(keys) + n)[:cmdHead+len(keys)]
	cmd[0], cmd[1], cmd[2] = "evalsha", &s.sha, len(keys)
	for i := range keys {
		cmd[cmdHead+i] = &keys[i]
	}
	return cmd
}

// The arrays of commands released for reuse: 32 arguments hold a call of
// one policy, 64 one of up to four. A longer command is made anew.
var commands32, commands64 sync.Pool

// newCommand is an empty command with room for size arguments, a released
// one's array when one fits.
func newCommand(size int) []any {
	switch {
	case size <= 32:
		if a, ok := commands32.Get().(*[32]any); ok {
			return a[:0]
		}
		return new([32]any)[:0]
	case size <= 64:
		if a, ok := commands64.Get().(*[64]any); ok {
			return a[:0]
		}
		return new([64]any)[:0]
	}
	return make([]any, 0, size)
}

// releaseCommand gives cmd, made by script.command, to the next command.
// Only the caller that read a reply to every try of cmd may release it:
// a call that stopped waiting may still be in a batch, whose worker reads
// its command (batcher).
func releaseCommand(cmd []any) {
	clear(cmd)
	switch cap(cmd) {
	case 32:
		commands32.Put((*[32]any)(cmd[:32]))
	case 64:
		commands64.Put((*[64]any)(cmd[:64]))
	}
}

// call is the EVALSHA of s over keys with args.
func (s *script) call(keys []string, args []any) []any {
	return append(s.command(keys, len(args)), args...)
}

// firstKey is the first key of a command made by script.command: the one
// whose slot the call goes to.
func firstKey(cmd []any) string { return *cmd[cmdHead].(*string) }

// key is the Redis key of a set's i-th policy and subject:
// <prefix>{<subject>}:<policy>:<revision>. The hash tag is the subject
// alone, so all the policies of one subject and operation (the pseudonym
// covers both) live on one Cluster slot and one script can decide them
// together. The subject is a pseudonym, so no raw identity reaches Redis.
func (r *Redis) key(set *PolicySet, i int, subject string) string {
	return r.prefix + "{" + subject + set.scriptArgs[i].keyTail
}

// keys are the keys of one call: each policy's state, all cut from one
// string. They share the subject's hash tag: one Cluster slot. With
// de-duplication the first holds the remembered evaluations too. See
// lua/prelude.lua.
func (r *Redis) keys(set *PolicySet, subject string) []string {
	head := len(r.prefix) + 1 + len(subject)
	size := 0
	for _, c := range set.scriptArgs {
		size += head + len(c.keyTail)
	}
	var b strings.Builder
	b.Grow(size)
	for _, c := range set.scriptArgs {
		b.WriteString(r.prefix)
		b.WriteByte('{')
		b.WriteString(subject)
		b.WriteString(c.keyTail)
	}
	all := b.String()
	keys := make([]string, 0, len(set.scriptArgs))
	at := 0
	for _, c := range set.scriptArgs {
		keys = append(keys, all[at:at+head+len(c.keyTail)])
		at += head + len(c.keyTail)
	}
	return keys
}

// remembering is how one call's evaluation is remembered (lua/prelude.lua):
// whether at all, in a ring of rememberedPlaces records, and whether a
// record of an earlier decision under its ID is looked for first (a
// retry, or an ID its caller did not make new). The zero value: not
// remembered.
type remembering struct {
	on, look bool
}

// scriptCall is what one call of the rate-limit script asks of a set,
// beyond the set's own arguments: appendArgs encodes it.
type scriptCall struct {
	cost  int64
	phase Phase
	// mayDelay: the caller can hold the request (Request.MayDelay).
	mayDelay bool
	rem      remembering
	// id, when not empty, follows every policy's arguments: the record's,
	// lease's or reservation's name.
	id string
	// budget asks for leases of budget (budget_lease.go); nil: none.
	budget *budgetCall
	// leaseStart is, when returningLease, the state start the returned
	// lease was charged to.
	leaseStart int64
}

// command is the EVALSHA of the rate-limit script that asks c of set for
// subject.
func (r *Redis) command(set *PolicySet, subject string, c scriptCall) []any {
	return r.appendArgs(r.script.command(r.keys(set, subject), argsSize(set, c)), set, c)
}

// argsSize is the length of the ARGV appendArgs writes.
func argsSize(set *PolicySet, c scriptCall) int {
	n := lua.ArgsHead + int(lua.ArgsPerPolicy)*set.Len()
	if c.id != "" {
		n++
	}
	return n
}

// appendArgs appends to cmd the script's ARGV for c over set: the one
// place the layout of lua/args.go is written from Go.
func (r *Redis) appendArgs(cmd []any, set *PolicySet, c scriptCall) []any {
	args := append(cmd, len(set.list), c.cost)
	for i, sp := range set.scriptArgs {
		p := sp.policy
		if i == 0 {
			var places, look any = 0, 0
			switch {
			case !c.rem.on:
			case len(set.list) == 1:
				places = sp.places
			default:
				places = rememberedPlaces(p.Dedup, len(set.list))
			}
			if c.rem.look {
				look = 1
			}
			args = append(args, sp.dedupTTL, places, look)
		}
		at := len(args)
		args = append(args, sp.args[:]...)
		if p.Clock == ClockGateway {
			args[at+int(lua.ArgNow)] = strconv.FormatInt(r.clock.Now().UnixMilli(), 10)
		}
		if c.phase != Admission {
			args[at+int(lua.ArgCharge)] = int(chargeMode(p, c.phase))
		}
		if !c.mayDelay && p.MaxDelay > 0 {
			args[at+int(lua.ArgMaxDelay)] = 0
		}
		if p.Calendar != 0 {
			args[at+int(lua.ArgWindow)] = sp.calendarArg(r.now(p).UnixMilli())
		}
		switch {
		case c.phase == returningLease:
			args[at+int(lua.ArgLease)] = c.leaseStart
		case c.budget == nil:
		case c.budget.asks[i] == budgetCovered:
			args[at+int(lua.ArgCharge)] = int(lua.ChargeCovered)
		default:
			args[at+int(lua.ArgLease)] = c.budget.asks[i]
		}
	}
	if c.id != "" {
		args = append(args, c.id)
	}
	return args
}

var errMalformedReply = errors.New("redis: malformed script reply")

// Script reply statuses; see lua/prelude.lua.
const (
	replyDecided     = 0
	replyClockUnsafe = 1
	replyUnreadable  = 2
	replyReplayed    = 3
)

// decodeReply reads the script's reply: a status, then four numbers per
// policy, then when the call asked for a lease of budget or a policy
// reserved each policy's state start, which it writes to starts (when
// not nil; left alone when the reply has none). clock is the
// gateway's injected clock: with the wall clock it is how a calendar
// policy's period is found from the time to its end.
func decodeReply(set *PolicySet, reply []any, clock Clock, starts []int64) Outcome {
	if len(reply) == 0 {
		return Indeterminate{Err: errMalformedReply}
	}
	status, ok := reply[0].(int64)
	if !ok {
		return Indeterminate{Err: errMalformedReply}
	}
	switch status {
	case replyClockUnsafe:
		return Unavailable{Category: ClockUnsafe}
	case replyUnreadable:
		return Incompatible{Reason: StateUnreadable}
	case replyDecided, replyReplayed:
	default:
		return Indeterminate{Err: errMalformedReply}
	}
	ps := set.list
	if len(reply) != 1+4*len(ps) && len(reply) != 1+5*len(ps) {
		return Indeterminate{Err: errMalformedReply}
	}
	for i := 0; i < len(starts) && len(reply) > 1+4*len(ps); i++ {
		c, ok := reply[1+4*len(ps)+i].(int64)
		if !ok {
			return Indeterminate{Err: errMalformedReply}
		}
		starts[i] = c
	}
	var eachOn [scratchPolicies]Decision
	each := eachOn[:0]
	for i, p := range ps {
		var n [4]int64
		for j := range n {
			x, ok := reply[1+4*i+j].(int64)
			if !ok {
				return Indeterminate{Err: errMalformedReply}
			}
			n[j] = x
		}
		var nowMillis int64
		if p.Calendar != 0 {
			nowMillis = policyNow(clock, p).UnixMilli()
		}
		each = append(each, p.decision(n[0] == 1, n[1], ms(n[2]), ms(n[3]), nowMillis))
	}
	return evaluated(ps, each)
}
