// Package lua holds the rate-limit script the Redis backend runs. It is
// one script for any number of policies and of requests: the prelude
// (keys, ARGV and reply, prelude.lua documents them; the call's clock and
// what its decisions read and write), the algorithms' common helper, one
// file per algorithm, the table that numbers them, then one decision as a
// function: its head (de-duplication replays) and the epilogue, which
// decides every policy; then the driver, which runs one decision or a
// batch of them and writes once. A decision's keys share the subject's
// hash tag, so it runs on Redis Cluster.
package lua

import (
	"embed"
	"slices"
	"strconv"
	"strings"
)

//go:embed *.lua
var files embed.FS

// algorithms are the algorithm files, each defining a function of the
// signature common.lua states, in the order of their numbers in ARGV from
// 1: package limiter's Algorithm values, which its tests hold to this
// list. A file is named after its algorithm, and its function after the
// file.
var algorithms = []string{"fixed-window", "sliding-counter", "token-bucket", "concurrency"}

// leaseAlgorithms count the live members of a policy's lease set as their
// state's count (epilogue.lua), as package limiter's concurrency does.
var leaseAlgorithms = []string{"concurrency"}

// startAlgorithms give a state the same TTL for as long as its start is
// the same (the window's end, and the grace after it): a charge that
// keeps the start asks no TTL of its own (epilogue.lua), when the clock is
// Redis's, the one every instance reads.
var startAlgorithms = []string{"fixed-window", "sliding-counter"}

// Algorithms names the algorithms by their number in ARGV, from 1.
func Algorithms() []string { return append([]string(nil), algorithms...) }

// Script is the whole rate-limit script.
var Script = script()

// Lease is the script that releases or renews a request's leases
// (lease.lua).
var Lease = read("lease_member.lua") + read("lease.lua")

// Penalties is the script that writes, lifts and sweeps the penalties
// shared over Redis (penalties.lua).
var Penalties = read("penalties.lua")

func script() string {
	var b strings.Builder
	b.WriteString(read("prelude.lua"))
	b.WriteString(args())
	b.WriteString(read("common.lua"))
	b.WriteString(read("lease_member.lua"))
	functions := make([]string, len(algorithms))
	leases := make([]string, len(algorithms))
	byStart := make([]string, len(algorithms))
	for i, a := range algorithms {
		functions[i] = strings.ReplaceAll(a, "-", "_")
		b.WriteString(read(functions[i] + ".lua"))
		leases[i] = strconv.FormatBool(slices.Contains(leaseAlgorithms, a))
		byStart[i] = strconv.FormatBool(slices.Contains(startAlgorithms, a))
	}
	b.WriteString("local decide_by = {" + strings.Join(functions, ", ") + "}\n")
	b.WriteString("local give_back_by = {" + strings.Join(functions, "_give_back, ") + "_give_back}\n")
	b.WriteString("local holds_leases = {" + strings.Join(leases, ", ") + "}\n")
	b.WriteString("local ttl_by_start = {" + strings.Join(byStart, ", ") + "}\n")
	b.WriteString("local function decide(KEYS, ARGV)\n")
	b.WriteString(read("decision.lua"))
	b.WriteString(read("epilogue.lua"))
	b.WriteString("end\n")
	b.WriteString(read("driver.lua"))
	return b.String()
}

func read(name string) string {
	src, err := files.ReadFile(name)
	if err != nil {
		panic(err) // a file the list names and the build lacks: every test fails at once
	}
	return string(src)
}
