package limiter

import (
	"context"

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
	// subscribed tells keepPenalties, which runs beside the subscription
	// until stop and then closes kept, that the penalties channel was
	// subscribed to, first or again: the hash is to be read.
	subscribed chan struct{}
	stop       context.CancelFunc
	kept       chan struct{}
	// loaded is closed once a read of the hash that followed the
	// subscription succeeded (Subscribed).
	loaded chan struct{}
}

// Subscribed is closed once this instance has subscribed to the resets
// and penalties channels and read the penalties in force: from then on
// it misses none. It stays open while the read fails.
func (r *Redis) Subscribed() <-chan struct{} { return r.resets.loaded }

// subscribeResets subscribes to the resets channel and forgets the
// remembered denials of each subject published there, until
// stopResets.
func (r *Redis) subscribeResets() {
	ps := r.client.Subscribe(context.Background(), r.resetsChannel(), r.penaltiesChannel())
	ctx, stop := context.WithCancel(context.Background())
	s := &resetSubscription{pubsub: ps, done: make(chan struct{}), subscribed: make(chan struct{}, 1),
		stop: stop, kept: make(chan struct{}), loaded: make(chan struct{})}
	go r.keepPenalties(ctx, s)
	go func() {
		defer close(s.done)
		for msg := range ps.ChannelWithSubscriptions() {
			switch m := msg.(type) {
			case *redis.Subscription:
				// Subscribed, first or again: what was published
				// meanwhile is in the hash (redis_penalties.go).
				if m.Kind == "subscribe" && m.Channel == r.penaltiesChannel() {
					select {
					case s.subscribed <- struct{}{}:
					default: // a read is due already
					}
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
// goroutines: a read of the hash in progress stops at its current step.
func (r *Redis) stopResets() {
	if r.resets == nil {
		return
	}
	r.resets.stop()
	<-r.resets.kept
	r.resets.pubsub.Close()
	<-r.resets.done
}
