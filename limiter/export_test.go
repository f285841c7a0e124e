package limiter

// Test-only access to internals, for the external test package.

// Len reports how many subjects the memory backend holds.
func (m *Memory) Len() int { return m.entries() }

// Sweep removes every expired entry now.
func (m *Memory) Sweep() { m.sweep() }

// Key is the Redis key a policy and subject are counted under.
func (r *Redis) Key(p *Policy, subject string) string { return r.key(p, subject) }

// ClassifyRedisError maps a go-redis error to its metric cause and outcome.
var ClassifyRedisError = classifyRedisError
