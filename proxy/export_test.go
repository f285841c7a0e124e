package proxy

import "time"

// SetLogClock makes h's access log throttle read the time from now.
func SetLogClock(h *Handler, now func() time.Time) { h.refusals.now = now }
