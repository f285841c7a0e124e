package limiter

import "time"

// Clock tells the time. Backends take one so tests can move time by hand.
type Clock interface {
	Now() time.Time
}

// systemClock is the process's wall clock.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
