// Package lua holds the rate-limit script the Redis backend runs. It is
// one script for any number of policies: the prelude (keys, ARGV, reply and
// de-duplication replays; prelude.lua documents them), the algorithms'
// common helper, one file per algorithm, the table that numbers them, and
// the epilogue, which decides every policy and writes. Its keys share the
// subject's hash tag, so it runs on Redis Cluster.
package lua

import (
	_ "embed"
	"strings"
)

var (
	//go:embed prelude.lua
	prelude string
	//go:embed common.lua
	common string
	//go:embed epilogue.lua
	epilogue string
	//go:embed fixed_window.lua
	fixedWindow string
	//go:embed sliding_counter.lua
	slidingCounter string
	//go:embed token_bucket.lua
	tokenBucket string
)

// An algorithm is one Lua file that defines a function of the signature
// common.lua states.
type algorithm struct {
	Name     string // as configured, and as package limiter names it
	function string
	src      string
}

// algorithms in the order of their numbers in ARGV, from 1: package
// limiter's Algorithm values, which its tests hold to this list.
var algorithms = []algorithm{
	{"fixed-window", "fixed_window", fixedWindow},
	{"sliding-counter", "sliding_counter", slidingCounter},
	{"token-bucket", "token_bucket", tokenBucket},
}

// Algorithms names the algorithms by their number in ARGV, from 1.
func Algorithms() []string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.Name
	}
	return names
}

// Script is the whole script.
var Script = script()

func script() string {
	var b strings.Builder
	b.WriteString(prelude)
	b.WriteString(common)
	functions := make([]string, len(algorithms))
	for i, a := range algorithms {
		b.WriteString(a.src)
		functions[i] = a.function
	}
	b.WriteString("local decide_by = {" + strings.Join(functions, ", ") + "}\n")
	b.WriteString(epilogue)
	return b.String()
}
