package overload

// Priority is the class of a request in a pool's queue: a freed slot goes
// to the highest priority waiting, and a full queue sheds the lowest.
type Priority uint8

const (
	Sheddable Priority = iota
	Default
	Critical
	numPriorities
)

var priorityNames = [numPriorities]string{"sheddable", "default", "critical"}

// Priorities are every priority, lowest first.
var Priorities = [numPriorities]Priority{Sheddable, Default, Critical}

// ParsePriority reads a priority name of the configuration file.
func ParsePriority(s string) (Priority, bool) {
	for p, name := range priorityNames {
		if s == name {
			return Priority(p), true
		}
	}
	return Default, false
}

func (p Priority) String() string {
	if p < numPriorities {
		return priorityNames[p]
	}
	return "unknown"
}
