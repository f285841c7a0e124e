package limiter

import "time"

// SetRestartWatchInterval sets how often backends made from now on read
// their masters' run_id, and returns the old interval.
func SetRestartWatchInterval(d time.Duration) time.Duration {
	old := restartWatchInterval
	restartWatchInterval = d
	return old
}
