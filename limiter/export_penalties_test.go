package limiter

import "time"

// MaxPenalties is how many penalties one instance's book holds.
const MaxPenalties = maxPenalties

// HoldPenalty puts p in this instance's book alone, as a message of
// another instance does.
func (r *Redis) HoldPenalty(p Penalty) { r.penalties.put(p, time.Now()) }
