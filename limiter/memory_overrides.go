package limiter

import (
	"context"
	"errors"
	"sync"
)

// memoryOverrides are a Memory backend's overrides: the list the admin API
// reads, by id, and each in force in its key's shard (memoryShard
// .overrides), where decisions read it under the shard's lock.
type memoryOverrides struct {
	m     *Memory
	mu    sync.Mutex
	index map[string]Override
}

// maxMemoryOverrides bounds the overrides one process keeps.
const maxMemoryOverrides = 100_000

// memoryOverride is an override in force in a shard: the limit, until
// when (Unix milliseconds of the backend's clock).
type memoryOverride struct {
	limit int64
	until int64
}

// Overrides are the backend's overrides.
func (m *Memory) Overrides() Overrides { return &m.overrides }

func (o *memoryOverrides) Set(_ context.Context, req Request, i int, ov Override) error {
	m := o.m
	if err := CheckOverride(ov, m.clock.Now()); err != nil {
		return err
	}
	var keyBuf [160]byte
	key := m.sum(appendMemoryKey(keyBuf[:0], req.Policies.list[i], req.Subject))
	ov.at = string(key[:])
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.index[ov.id()]; !ok && len(o.index) >= maxMemoryOverrides {
		return errors.New("too many overrides: delete some first")
	}
	if o.index == nil {
		o.index = map[string]Override{}
	}
	o.index[ov.id()] = ov
	s := &m.shards[key[0]%memoryShards]
	s.mu.Lock()
	if s.overrides == nil {
		s.overrides = map[memoryKey]memoryOverride{}
	}
	s.overrides[key] = memoryOverride{limit: ov.Limit, until: ov.Expires.UnixMilli()}
	s.mu.Unlock()
	return nil
}

func (o *memoryOverrides) Delete(_ context.Context, route, policy, pseudonym string) (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := (&Override{Route: route, Policy: policy, Pseudonym: pseudonym}).id()
	ov, ok := o.index[id]
	if !ok {
		return false, nil
	}
	delete(o.index, id)
	o.forget(ov)
	return ov.Expires.After(o.m.clock.Now()), nil
}

// forget takes ov out of its shard.
func (o *memoryOverrides) forget(ov Override) {
	key := memoryKey([]byte(ov.at))
	s := &o.m.shards[key[0]%memoryShards]
	s.mu.Lock()
	delete(s.overrides, key)
	s.mu.Unlock()
}

func (o *memoryOverrides) List(context.Context) ([]Override, error) {
	now := o.m.clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Override, 0, len(o.index))
	for id, ov := range o.index {
		if !ov.Expires.After(now) {
			delete(o.index, id)
			o.forget(ov)
			continue
		}
		out = append(out, ov)
	}
	return out, nil
}

// policyFor is p as it applies to key now: with the limit of an override
// in force, else p itself. The shard's lock is held.
func (s *memoryShard) policyFor(key memoryKey, p *Policy, nowMillis int64) *Policy {
	if len(s.overrides) == 0 {
		return p
	}
	ov, ok := s.overrides[key]
	switch {
	case !ok:
		return p
	case ov.until <= nowMillis:
		delete(s.overrides, key)
		return p
	}
	return overridden(p, ov.limit)
}
