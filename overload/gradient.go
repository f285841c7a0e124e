package overload

import (
	"math/rand/v2"
	"slices"
	"time"
)

// Tuning of the adaptive limit; the package doc says why these.
const (
	// windowLength and windowSamples bound a sampling window: it closes on
	// the first latency after windowLength once it holds windowSamples,
	// or when it holds maxWindowSamples.
	windowLength     = 100 * time.Millisecond
	windowSamples    = 8
	maxWindowSamples = 128
	// probeSamples latencies of requests admitted while the limit is held
	// at MinLimit give the baseline (their median), every probeInterval
	// plus up to a quarter of it at random, so instances do not probe at
	// once.
	probeSamples  = 16
	probeInterval = 30 * time.Second
	// tolerance is how much above the baseline a window's latency may be
	// before the limit falls: the backend may queue a little, which keeps
	// it busy.
	tolerance = 1.25
	// A window moves the limit by at most these factors, and by smoothing
	// of the way there.
	minGradient = 0.5
	maxGradient = 2
	smoothing   = 0.25
)

// gradient is the adaptive limit's state. The Controller's mutex guards it.
type gradient struct {
	limit    float64
	min, max float64
	// baseline is the backend's latency unloaded: the median latency of a
	// probe, when the limit is held at min.
	baseline  time.Duration
	probing   bool
	epoch     uint64 // of the probe under way, or the last one
	probe     [probeSamples]time.Duration
	probed    int
	nextProbe time.Time
	// The window under way: its start, its latencies, and the most
	// requests in flight during it.
	windowStart time.Time
	window      [maxWindowSamples]time.Duration
	samples     int
	peak        int
}

// newGradient starts with a probe: until the baseline is known, the limit
// is min.
func newGradient(minLimit, maxInFlight int) *gradient {
	return &gradient{limit: float64(minLimit), min: float64(minLimit), max: float64(maxInFlight), probing: true, epoch: 1}
}

// capacity is the number of requests that may be in flight now.
func (g *gradient) capacity() int {
	if g.probing {
		return int(g.min)
	}
	return int(g.limit)
}

// retune takes new bounds, keeping what was learnt.
func (g *gradient) retune(minLimit, maxInFlight int) {
	g.min, g.max = float64(minLimit), float64(maxInFlight)
	g.limit = min(max(g.limit, g.min), g.max)
}

// admitted notes the requests in flight after an admission.
func (g *gradient) admitted(inFlight int) {
	g.peak = max(g.peak, inFlight)
}

// sample takes the latency d of a request admitted in epoch, ending at
// now with inFlight others still in flight.
func (g *gradient) sample(epoch uint64, d time.Duration, now time.Time, inFlight int) {
	if g.probing {
		if epoch != g.epoch {
			return // admitted before the probe, under a higher limit
		}
		g.probe[g.probed] = d
		g.probed++
		if g.probed == probeSamples {
			slices.Sort(g.probe[:])
			g.baseline = max(g.probe[probeSamples/2], time.Microsecond)
			g.probing = false
			g.nextProbe = now.Add(probeInterval + rand.N(probeInterval/4))
			g.startWindow(now, inFlight)
		}
		return
	}
	if !now.Before(g.nextProbe) {
		g.probing, g.probed = true, 0
		g.epoch++
		return
	}
	g.window[g.samples] = d
	g.samples++
	if g.samples < maxWindowSamples && (g.samples < windowSamples || now.Sub(g.windowStart) < windowLength) {
		return
	}
	// The median: a request that a busy machine kept waiting for its
	// thread says nothing of the backend, and would move a mean.
	w := g.window[:g.samples]
	slices.Sort(w)
	current := max(w[len(w)/2], time.Microsecond)
	ratio := min(max(tolerance*float64(g.baseline)/float64(current), minGradient), maxGradient)
	if ratio > 1 && g.peak < int(g.limit) {
		// Demand never reached the limit: the latency says nothing of
		// what more would do.
		ratio = 1
	}
	g.limit = min(max(g.limit*(1-smoothing)+g.limit*ratio*smoothing, g.min), g.max)
	g.startWindow(now, inFlight)
}

// slow reports whether d is no less than the unloaded latency, once a
// probe has found it.
func (g *gradient) slow(d time.Duration) bool {
	return !g.probing && d >= g.baseline
}

func (g *gradient) startWindow(now time.Time, inFlight int) {
	g.windowStart, g.samples, g.peak = now, 0, inFlight
}
