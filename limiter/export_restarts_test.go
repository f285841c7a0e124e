package limiter

import "time"

// SetRestartWatchInterval sets how often backends made from now on read
// their masters' run_id, and returns the old interval.
func SetRestartWatchInterval(d time.Duration) time.Duration {
	old := restartWatchInterval
	restartWatchInterval = d
	return old
}

// NodeStates counts the nodes the backend holds a batcher or breaker for.
func (r *Redis) NodeStates() int {
	nodes := r.nodes.Load()
	if nodes == nil {
		return 0
	}
	return len(*nodes)
}
