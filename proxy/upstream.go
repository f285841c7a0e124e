package proxy

import (
	"fmt"
	"net/url"
	"time"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/overload"
)

// Pool is one upstream block: the targets a route forwards to, how a
// request picks one, and when a target is taken out of rotation. Zero
// values take the defaults below. A route that names a URL instead of a
// pool forwards to a pool of that one target with every default.
type Pool struct {
	Name string
	// Targets are the URLs a request may go to, each http:// or https://
	// with a host and no credentials, query or fragment (Validate).
	Targets []string
	Balance Balance
	// ConnectTimeout bounds the dial to a target; default 5s. A dial that
	// fails or times out sent nothing, so the request may go to another
	// target (see the retry rule on Route).
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for the response headers once the
	// request is sent; default 60s. Past it the client gets 504.
	ResponseTimeout time.Duration
	// MaxFails consecutive failures (refused, reset, timed out) eject a
	// target for FailTimeout; default 3, negative never. A pool of one
	// target never ejects it on failures, as nginx does: with nowhere
	// else to send, a short outage would become a longer one.
	MaxFails    int
	FailTimeout time.Duration // default 10s
	// EjectOnTimeout counts a response timeout as a failure toward
	// MaxFails. By default it does not: a slow answer is more often the
	// request's doing than the target's (one client's slow requests
	// would otherwise eject every target of the pool).
	EjectOnTimeout bool
	// MaxEjectedPercent caps the share of the pool's targets that failures
	// keep out of rotation at once (rounded down); default 50, negative
	// none. Failures never take out the last target in rotation,
	// whatever the share.
	MaxEjectedPercent int
	Health            *HealthCheck // nil: failures of real requests only
	// Overload limits the requests in flight to the pool from this
	// instance and queues those over the limit (overload.Options; nil: no
	// limit). Its QueueTimeout is at most ResponseTimeout.
	Overload *overload.Options
}

// HealthCheck is a pool's active check: a GET of Path on every target each
// Interval. A check that fails (no answer within Timeout, or a status
// other than 2xx and 3xx) ejects the target until two checks in a row
// pass; two passes also end an ejection for failures before its
// FailTimeout.
type HealthCheck struct {
	Path     string        // absolute, on the target's host
	Interval time.Duration // default 5s
	Timeout  time.Duration // default 2s, at most Interval
}

// Balance is how a request picks among the targets in rotation.
type Balance int

const (
	RoundRobin Balance = iota
	// LeastRequests picks the less busy of two targets drawn at random
	// (the power of two choices): as good as a scan in practice, and it
	// never sends a burst to one target that just looked idle.
	LeastRequests
)

// ParseBalance maps a configuration name to a Balance; an unknown name is
// an *option.Error of the field balance.
func ParseBalance(s string) (Balance, error) {
	for _, b := range []Balance{RoundRobin, LeastRequests} {
		if b.String() == s {
			return b, nil
		}
	}
	return RoundRobin, option.Unknown("balance", "Unknown balance", s, []string{RoundRobin.String(), LeastRequests.String()})
}

func (b Balance) String() string {
	if b == LeastRequests {
		return "least_requests"
	}
	return "round_robin"
}

// Defaults of a Pool.
const (
	DefaultConnectTimeout    = 5 * time.Second
	DefaultResponseTimeout   = 60 * time.Second
	DefaultMaxFails          = 3
	DefaultFailTimeout       = 10 * time.Second
	DefaultMaxEjectedPercent = 50
	DefaultHealthInterval    = 5 * time.Second
	DefaultHealthTimeout     = 2 * time.Second
)

// withDefaults checks p and fills in what it leaves zero.
func (p Pool) withDefaults() (Pool, error) {
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("proxy: pool %q: %w", p.Name, err)
	}
	p.ConnectTimeout = defaultIfZero(p.ConnectTimeout, DefaultConnectTimeout)
	p.ResponseTimeout = defaultIfZero(p.ResponseTimeout, DefaultResponseTimeout)
	p.FailTimeout = defaultIfZero(p.FailTimeout, DefaultFailTimeout)
	if p.MaxFails == 0 {
		p.MaxFails = DefaultMaxFails
	}
	if p.MaxEjectedPercent == 0 {
		p.MaxEjectedPercent = DefaultMaxEjectedPercent
	}
	if h := p.Health; h != nil {
		c := *h
		c.Interval = defaultIfZero(c.Interval, DefaultHealthInterval)
		c.Timeout = min(defaultIfZero(c.Timeout, DefaultHealthTimeout), c.Interval)
		p.Health = &c
	}
	return p, nil
}

// parseTarget parses s as a pool's target or a route's upstream URL,
// reporting whether it is one: an http:// or https:// URL with a host and
// no credentials, query or fragment.
func parseTarget(s string) (*url.URL, bool) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, false
	}
	return u, true
}

func defaultIfZero(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
