package lua

import (
	"strconv"
	"strings"
)

// The rate-limit script's ARGV (prelude.lua): ArgsHead values for the
// call, then ArgsPerPolicy for each policy, in the order of Arg. Go
// writes them (package limiter) and the script reads them by the names
// args() generates, so the layout is written here once.
const ArgsHead = 5

// Arg is one of a policy's arguments: its place, from 0, in the policy's
// part of ARGV.
type Arg int

const (
	ArgAlgorithm          Arg = iota // its place in decide_by
	ArgNow                           // ms, or "" to read Redis TIME
	ArgLimit                         // limit or capacity
	ArgWindow                        // window or refill period in ms, or a calendar's bounds
	ArgRefill                        // refill tokens
	ArgCleanupGrace                  // ms
	ArgMaxClockRegression            // ms
	ArgShadow                        // 1 shadow, 0 enforced
	ArgCharge                        // a Charge
	ArgMaxDelay                      // ms; 0 refuses rather than delays
	ArgLease                         // units of budget asked, or a returned lease's state start
	ArgReserve                       // units a response-charged policy reserves at admission
	ArgsPerPolicy         = iota
)

// argNames are the script's names of the Args, in their order.
var argNames = [ArgsPerPolicy]string{"algorithm", "now", "limit", "window", "refill", "cleanup_grace",
	"max_clock_regression", "shadow", "charge", "max_delay", "lease", "reserve"}

// Charge is how one policy of a call is charged (ArgCharge).
type Charge int

const (
	ChargeFits     Charge = iota // the cost, when it fits
	ChargeReserve                // the policy's reserve (ArgReserve), when it fits
	ChargeDebt                   // the cost whatever is left: a debt may follow
	ChargeReserved               // given back what the reservation record says
	ChargeCovered                // covered by the caller's lease of budget: nothing charged
	ChargeReturned               // a lease's unused units, the cost, given back
)

// chargeNames are the script's names of the Charges, in their order.
var chargeNames = [ChargeReturned + 1]string{"fits", "reserve", "debt", "reserved", "covered", "returned"}

// args is the Lua that names the layout: argv_head, per_policy, arg_<name>
// (a policy's argument at ARGV[at + arg_<name>], at its part's start less
// one) and charge_<name> (as ARGV carries it, a string).
func args() string {
	var b strings.Builder
	b.WriteString("local argv_head, per_policy = " + strconv.Itoa(ArgsHead) + ", " + strconv.Itoa(int(ArgsPerPolicy)) + "\n")
	for i, n := range argNames {
		b.WriteString("local arg_" + n + " = " + strconv.Itoa(i+1) + "\n")
	}
	for i, n := range chargeNames {
		b.WriteString("local charge_" + n + " = '" + strconv.Itoa(i) + "'\n")
	}
	return b.String()
}
