package main

import (
	"io"
	"strings"
	"testing"
)

func TestRotatedAddrsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for i := range 70000 {
		a := rotatedAddr(i)
		if seen[a] {
			t.Fatalf("address %d, %s, came before", i, a)
		}
		seen[a] = true
	}
	if got := rotatedAddr(65536 + 2*256 + 3); got != "10.1.2.3" {
		t.Errorf("rotatedAddr(65536+2*256+3) = %s, want 10.1.2.3", got)
	}
}

func TestSubjectsFlagPerMode(t *testing.T) {
	for _, c := range []struct {
		args          []string
		main, soak    int
		wantErrSubstr string
	}{
		{args: nil, main: 0, soak: 8},
		{args: []string{"-subjects", "100000"}, main: 100000, soak: 8},
		{args: []string{"-mode", "soak"}, main: 0, soak: 8},
		{args: []string{"-mode", "soak", "-subjects", "20"}, main: 0, soak: 20},
		{args: []string{"-mode", "soak", "-subjects", "300"}, wantErrSubstr: "-subjects"},
		{args: []string{"-subjects", "0"}, wantErrSubstr: "-subjects"},
	} {
		s, err := parseSettings(c.args, io.Discard)
		if c.wantErrSubstr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErrSubstr) {
				t.Errorf("%q: error %v, want one naming %s", c.args, err, c.wantErrSubstr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if s.subjects != c.main || s.soak.subjects != c.soak {
			t.Errorf("%q: main %d, soak %d subjects; want %d and %d", c.args, s.subjects, s.soak.subjects, c.main, c.soak)
		}
	}
}

func TestRatioTableComparesARotationWithItsHotKey(t *testing.T) {
	var samples []sample
	add := func(target string, round int, perSecond, micros float64) {
		samples = append(samples, sample{target: target, conns: 64, round: round, load: loadResult{perSecond: perSecond}, microsPerRequest: micros})
	}
	// The rounds' own ratios are 0.90, 0.90 and 0.50 (1.10, 1.10, 2.00);
	// the medians of each target over the rounds (1000 and 500 req/s)
	// would make 0.50 of it.
	add("gateway-memory", 1, 1000, 100)
	add("gateway-memory-100k-subjects", 1, 900, 110)
	add("gateway-memory", 2, 500, 200)
	add("gateway-memory-100k-subjects", 2, 450, 220)
	add("gateway-memory", 3, 1000, 100)
	add("gateway-memory-100k-subjects", 3, 500, 200)
	add("gateway-memory-100k-subjects", 4, 1, 1) // its hot key never ran in round 4
	got := ratioTable(samples, [][2]string{{"gateway-memory-100k-subjects", "gateway-memory"}})
	if want := "| gateway-memory-100k-subjects / gateway-memory | 0.90 (1.10) · 0.90 (1.10), 0.90 (1.10), 0.50 (2.00) |"; !strings.Contains(got, want) {
		t.Errorf("ratio table:\n%s\nwant a row %s", got, want)
	}
	if name := rotationName("gateway-redis", 100000); name != "gateway-redis-100k-subjects" {
		t.Errorf("rotationName = %s", name)
	}
}
