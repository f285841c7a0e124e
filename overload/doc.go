// Package overload keeps a backend that cannot protect itself from being
// sent more than it can serve: a limit on the requests in flight to a
// pool, a queue for those over it, and a limit that can follow the
// backend's latency. It knows nothing of HTTP; proxy asks a Controller
// for a slot before it forwards and releases it when the exchange ends.
//
// # The queue
//
// A freed slot goes to the highest priority waiting. Within a priority,
// tenants (pseudonyms) take turns: each has its own FIFO, and the tenants
// with waiters form a ring, so a tenant with a hundred waiters and one
// with a single waiter alternate. A full queue sheds, at the lowest
// priority below the arrival's with waiters, the newest waiter of the
// tenant with the most waiting; failing that, at the arrival's own
// priority, the newest waiter of the tenant with the most waiting when
// that is more than the arrival's tenant would have (so one tenant cannot
// hold the whole queue); otherwise the arrival. A waiter whose context ends leaves the queue at
// once. Nothing here runs on its own: the queue moves when a request
// arrives, leaves or is released, and a Controller starts no goroutine.
//
// # The adaptive limit, and why this one
//
// Envoy's adaptive concurrency filter and Netflix's Gradient2 both take a
// gradient: an estimate of the backend's latency unloaded over its latency
// now, which falls below 1 as the backend queues. They differ in the
// estimate of "unloaded". Gradient2 keeps a long exponential average of
// latency; under load that never lets up, the average drifts up with the
// queue it should detect, and the limit creeps up with it. Envoy measures
// the minimum latency afresh at intervals, holding the limit at its floor
// for a short window so that the backend's queue drains while it measures.
// This package takes Envoy's way, because the backends it guards are
// queues (a worker pool with a backlog): held at min_limit, a probe of 16
// requests admitted within it gives the median latency of a backend that
// does not queue, the baseline, every 30 s (plus up to 7.5 s at random,
// so instances do not probe together). Only requests admitted during the
// probe count, not those that began under the higher limit. A probe costs
// the requests that arrive while the backend's queue drains a wait of
// about one unloaded latency: at every 10 s that was over 1% of them, and
// moved a p99; Envoy probes every 60 s. The price of the longer interval:
// a backend whose unloaded latency itself grows keeps a limit near
// min_limit until the next probe finds its new baseline.
//
// Between probes, latencies are gathered in windows of at least 100 ms and
// 8 samples (at most 128). Each window moves the limit by the gradient
// 1.25 × baseline / the window's median latency (Envoy's default
// percentile: unlike a mean, it is not moved by the few requests a busy
// machine kept waiting for a thread), clamped to [0.5, 2], with Gradient2's
// smoothing (a quarter of the way): the backend may queue up to a quarter
// of its unloaded latency, which keeps its workers busy without making
// every request wait; past that, the limit
// falls by up to an eighth a window, so a backend whose capacity halves
// sees its limit halved in well under a second; and it rises by up to a
// quarter a window when latency is back, but only in windows whose demand
// reached the limit (Gradient2's rule for an idle limit: a latency
// measured below the limit says nothing of what more would do). The limit
// stays within [min_limit, max_in_flight].
//
// A request whose client left, or that the gateway answered itself, is
// released without its latency (Admission.Abandon). One the pool failed
// gives its latency only when no faster than the baseline
// (Admission.Fail): a backend that fails at once would otherwise look
// fast, and the limit would rise as it fails.
package overload
