// Package series binds metric series to their labels as requests first
// need them, so that the request path observes without a label lookup.
package series

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Bound are series bound to their labels by key, each the first time a
// request needs it: binding every key at once would export empty series
// for keys that never come. Once a key is bound, Get reads a map that is
// never written again (a new key copies it), so concurrent requests share
// it without a lock. The zero value is ready to use.
type Bound[K comparable, V any] struct {
	m    atomic.Pointer[map[K]V]
	bind sync.Mutex // one writer of m at a time
}

// Get is key's series, made by bind the first time.
func (b *Bound[K, V]) Get(key K, bind func(K) V) V {
	if m := b.m.Load(); m != nil {
		if v, ok := (*m)[key]; ok {
			return v
		}
	}
	b.bind.Lock()
	defer b.bind.Unlock()
	var next map[K]V
	if m := b.m.Load(); m != nil {
		if v, ok := (*m)[key]; ok {
			return v
		}
		next = maps.Clone(*m)
	} else {
		next = map[K]V{}
	}
	v := bind(key)
	next[key] = v
	b.m.Store(&next)
	return v
}
