package limiter

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Resets across instances. Every instance subscribes to one channel of
// the Redis it shares; Reset publishes the subject it reset there, and
// each subscriber, the publisher included, forgets the denials it
// remembers of that subject, and drops its leases of budget of it. The
// message is the pseudonym, as in the keys: no raw identity. The same
// subscription carries the penalties channel (redis_penalties.go). On Redis Cluster a publish
// reaches the subscribers of every node.
//
// go-redis's PubSub subscribes again by itself after a lost connection; a
// reset published meanwhile is missed, and the denials it would have
// dropped stand until their own retry time, as they would have without
// the reset (at most one denial period: docs/redis.md).

// resetsChannel carries the subjects reset by any instance sharing this
// Redis. It starts with the key prefix, so instances of different key
// prefixes, which share no budgets, share no resets either.
func (r *Redis) resetsChannel() string { return r.prefix + "resets" }

// resetSubscription is one instance's subscription to the resets channel.
type resetSubscription struct {
	pubsub *redis.PubSub
	done   chan struct{}
	// loaded is closed once the first subscription has read the
	// penalties in force (Subscribed).
	loaded chan struct{}
	// The sweep of the penalties' hash (sweepPenalties) runs beside the
	// subscription until stopSweep, then closes swept.
	stopSweep context.CancelFunc
	swept     chan struct{}
}

// Subscribed is closed once this instance has subscribed to the resets
// and penalties channels and read the penalties in force: from then on
// it misses none.
func (r *Redis) Subscribed() <-chan struct{} { return r.resets.loaded }

// subscribeResets subscribes to the resets channel and forgets the
// remembered denials of each subject published there, until
// stopResets.
func (r *Redis) subscribeResets() {
	ps := r.client.Subscribe(context.Background(), r.resetsChannel(), r.penaltiesChannel())
	sweep, stopSweep := context.WithCancel(context.Background())
	s := &resetSubscription{pubsub: ps, done: make(chan struct{}), loaded: make(chan struct{}),
		stopSweep: stopSweep, swept: make(chan struct{})}
	go r.sweepPenalties(sweep, s.swept)
	go func() {
		defer close(s.done)
		var loaded sync.Once
		for msg := range ps.ChannelWithSubscriptions() {
			switch m := msg.(type) {
			case *redis.Subscription:
				// Subscribed, first or again: what was published
				// meanwhile is in the hash (redis_penalties.go).
				if m.Kind == "subscribe" && m.Channel == r.penaltiesChannel() {
					r.loadPenalties()
					loaded.Do(func() { close(s.loaded) })
				}
			case *redis.Message:
				if m.Channel == r.penaltiesChannel() {
					r.penaltyMessage(m.Payload)
					continue
				}
				if r.denials != nil {
					r.denials.forget(m.Payload)
				}
				r.budget.forget(m.Payload)
			}
		}
	}()
	r.resets = s
}

// stopResets ends the subscription, if there is one, and waits for its
// goroutine.
func (r *Redis) stopResets() {
	if r.resets == nil {
		return
	}
	r.resets.stopSweep()
	<-r.resets.swept
	r.resets.pubsub.Close()
	<-r.resets.done
}
