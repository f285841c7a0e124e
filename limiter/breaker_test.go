package limiter

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestBreakerLetsOneProbeThroughAtATime(t *testing.T) {
	b := newBreaker("n", BreakerOptions{Failures: 2, Cooldown: time.Second}, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}), slog.New(slog.DiscardHandler))
	now := time.Unix(1_800_000_000, 0)
	b.record(false, now)
	if !allowed(b, now) {
		t.Fatal("open after one failure of two")
	}
	b.record(true, now) // a success in between starts the count again
	b.record(false, now)
	b.record(false, now)
	if allowed(b, now.Add(time.Second-time.Nanosecond)) {
		t.Fatal("closed within the cooldown")
	}
	probeAt := now.Add(time.Second)
	if ok, probe := b.allow(probeAt); !ok || !probe {
		t.Fatalf("after the cooldown: allowed %v, probe %v; want the probe", ok, probe)
	}
	if allowed(b, probeAt) {
		t.Fatal("a second call went through while the probe was out")
	}
	b.abandon() // the probe's caller went away: the next call probes
	if !allowed(b, probeAt) {
		t.Fatal("no probe after an abandoned one")
	}
	b.record(false, probeAt) // the probe failed: open for another cooldown
	if allowed(b, probeAt.Add(time.Second-time.Nanosecond)) {
		t.Fatal("closed after a failed probe")
	}
	if !allowed(b, probeAt.Add(time.Second)) {
		t.Fatal("no probe after the second cooldown")
	}
	b.record(true, probeAt.Add(time.Second))
	for range 5 {
		if !allowed(b, probeAt.Add(time.Second)) {
			t.Fatal("refused after a successful probe")
		}
	}
}

// A calm breaker is one whose allow and successful record a caller may
// skip: closed, no failure counted.
func TestBreakerIsCalmOnlyClosedWithoutFailures(t *testing.T) {
	b := newBreaker("n", BreakerOptions{Failures: 2, Cooldown: time.Second}, prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}), slog.New(slog.DiscardHandler))
	now := time.Unix(1_800_000_000, 0)
	if !b.calm() {
		t.Fatal("a new breaker is not calm")
	}
	b.record(false, now)
	if b.calm() {
		t.Fatal("calm with a failure counted")
	}
	b.record(true, now)
	if !b.calm() {
		t.Fatal("not calm after a success reset the count")
	}
	b.record(false, now)
	b.record(false, now)
	if b.calm() {
		t.Fatal("calm while open")
	}
	allowed(b, now.Add(time.Second))
	if b.calm() {
		t.Fatal("calm while a probe is out")
	}
	b.record(true, now.Add(time.Second))
	if !b.calm() {
		t.Fatal("not calm after a successful probe closed it")
	}
}

// allowed is b.allow's verdict alone.
func allowed(b *breaker, now time.Time) bool {
	ok, _ := b.allow(now)
	return ok
}
