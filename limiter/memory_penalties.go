package limiter

import (
	"context"
	"time"
)

// memoryPenalties are a Memory backend's penalties: this process's alone.
type memoryPenalties struct{ book penaltyBook }

// Penalties are the backend's penalties.
func (m *Memory) Penalties() Penalties { return &m.penalties }

func (p *memoryPenalties) Impose(_ context.Context, pen Penalty) error {
	p.book.put(pen, pen.Start)
	return nil
}

func (p *memoryPenalties) Find(route, pseudonym string, now time.Time) (Penalty, bool) {
	return p.book.find(route, pseudonym, now)
}

func (p *memoryPenalties) List(route string, now time.Time) []Penalty {
	return p.book.list(route, now)
}

func (p *memoryPenalties) Lift(_ context.Context, route, pseudonym string) (bool, error) {
	return p.book.lift(route, pseudonym, time.Now()), nil
}
