package overload

import "github.com/edgegate/gateway/internal/option"

// Priority is the class of a request in a pool's queue: a freed slot goes
// to the highest priority waiting, and a full queue sheds the lowest. The
// zero Priority is Default.
type Priority int8

const (
	Sheddable Priority = iota - 1
	Default
	Critical
)

// numPriorities counts the priorities; a priority's index in an array of
// them, lowest first, is p.index().
const numPriorities = 3

func (p Priority) index() int { return int(p) + 1 }

var priorityNames = [numPriorities]string{"sheddable", "default", "critical"}

// Priorities are every priority, lowest first.
var Priorities = [numPriorities]Priority{Sheddable, Default, Critical}

// ParsePriority reads a priority name of the configuration file; an
// unknown one is an *option.Error, and Default.
func ParsePriority(s string) (Priority, error) {
	for _, p := range Priorities {
		if s == priorityNames[p.index()] {
			return p, nil
		}
	}
	return Default, option.Unknown("priority", "Unknown priority", s, []string{Critical.String(), Default.String(), Sheddable.String()})
}

// Valid reports whether p is one of Priorities.
func (p Priority) Valid() bool { return p >= Sheddable && p <= Critical }

func (p Priority) String() string {
	if p.Valid() {
		return priorityNames[p.index()]
	}
	return "unknown"
}
