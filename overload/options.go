package overload

import (
	"errors"
	"fmt"
	"time"

	"github.com/edgegate/gateway/internal/option"
)

// Options are a pool's overload block. Zero values take the defaults
// below; Validate says what else is refused.
type Options struct {
	// MaxInFlight caps the requests in flight to the pool from this
	// instance: the limit itself, or with Adaptive the limit's ceiling.
	MaxInFlight int
	// Adaptive lets the limit follow the pool's latency, between MinLimit
	// and MaxInFlight (see the package doc).
	Adaptive bool
	// MinLimit is the adaptive limit's floor, and the concurrency at which
	// the pool's unloaded latency is measured; it should not queue the
	// backend. Default DefaultMinLimit, or MaxInFlight when that is lower.
	MinLimit int
	// Queue is how many requests may wait for a slot; default MaxInFlight,
	// negative none (a request that finds the pool at its limit is shed).
	Queue int
	// QueueTimeout is the longest a request waits in the queue; default
	// DefaultQueueTimeout.
	QueueTimeout time.Duration
	// Now reads the clock for latencies; nil is time.Now.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultMinLimit     = 4
	DefaultQueueTimeout = time.Second
	// MinQueueTimeout is the least QueueTimeout may be when set.
	MinQueueTimeout = time.Millisecond
)

// Validate reports every problem of o, each an *option.Error naming its
// option as the configuration file names it ("min_limit"), joined; nil
// means New accepts o.
func (o Options) Validate() error {
	var errs []error
	problem := func(field, summary, detail string) {
		errs = append(errs, &option.Error{Field: field, Summary: summary, Detail: detail})
	}
	if o.MaxInFlight < 1 {
		problem("max_in_flight", "Value too small", "max_in_flight must be at least 1.")
	}
	if o.MinLimit < 0 {
		problem("min_limit", "Value too small", "min_limit must be at least 1.")
	}
	if o.MinLimit > 0 && o.MaxInFlight >= 1 && o.MinLimit > o.MaxInFlight {
		problem("min_limit", "min_limit above max_in_flight",
			fmt.Sprintf("min_limit is %d but max_in_flight is %d; the adaptive limit lies between them.", o.MinLimit, o.MaxInFlight))
	}
	if o.MinLimit > 0 && !o.Adaptive {
		problem("min_limit", "min_limit without adaptive", "min_limit is the adaptive limit's floor; with adaptive = false the limit is max_in_flight.")
	}
	if o.QueueTimeout != 0 && o.QueueTimeout < MinQueueTimeout {
		problem("queue_timeout", "Duration too short", fmt.Sprintf("queue_timeout must be at least %s.", MinQueueTimeout))
	}
	return errors.Join(errs...)
}

// withDefaults fills in what o leaves zero.
func (o Options) withDefaults() Options {
	if o.MinLimit == 0 {
		o.MinLimit = min(DefaultMinLimit, o.MaxInFlight)
	}
	if !o.Adaptive {
		o.MinLimit = o.MaxInFlight
	}
	switch {
	case o.Queue == 0:
		o.Queue = o.MaxInFlight
	case o.Queue < 0:
		o.Queue = 0
	}
	if o.QueueTimeout == 0 {
		o.QueueTimeout = DefaultQueueTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
