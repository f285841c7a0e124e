package limiter

import (
	"log/slog"
	"time"
)

// MaxPenalties is how many penalties one instance's book holds.
const MaxPenalties = maxPenalties

// HoldPenalty puts p in this instance's book alone, as a message of
// another instance does.
func (r *Redis) HoldPenalty(p Penalty) { r.penalties.put(p, time.Now()) }

// PenaltyStepLog is a penaltyStepLog, for a test that gives it the times.
type PenaltyStepLog struct{ l penaltyStepLog }

func NewPenaltyStepLog(step string) *PenaltyStepLog {
	return &PenaltyStepLog{penaltyStepLog{step: step}}
}

func (l *PenaltyStepLog) Note(logger *slog.Logger, err error, now time.Time) {
	l.l.note(logger, err, now)
}
