package main

import (
	"math"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name      string
		line      string
		wantPPID  int
		wantTicks cpuTicks
	}{
		{
			name:      "utime and stime are added and the parent is read",
			line:      "4242 (gateway) S 4200 4242 4200 0 -1 4194560 5000 0 0 0 1234 567 0 0 20 0 6 0 900 1300000000 9000 18446744073709551615",
			wantPPID:  4200,
			wantTicks: cpuTicks{all: 1801, sys: 567},
		},
		{
			name:      "a command name with spaces and parentheses does not shift the fields",
			line:      "77 (nginx: worker (x) ) R 76 76 76 0 -1 4194624 100 0 0 0 50 25 0 0 20 0 1 0 901 1000 100 18446744073709551615",
			wantPPID:  76,
			wantTicks: cpuTicks{all: 75, sys: 25},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStat(tt.line)
			if err != nil {
				t.Fatal(err)
			}
			if got.ppid != tt.wantPPID || got.cpuTicks != tt.wantTicks {
				t.Errorf("got ppid %d ticks %+v, want %d and %+v", got.ppid, got.cpuTicks, tt.wantPPID, tt.wantTicks)
			}
		})
	}
	t.Run("a line without a command name is an error", func(t *testing.T) {
		if _, err := parseProcStat("4242 gateway S 1"); err == nil {
			t.Error("no error")
		}
	})
}

func TestProcessTreeTicksCountDescendants(t *testing.T) {
	table := processTable{
		10: {ppid: 1, cpuTicks: cpuTicks{all: 5, sys: 2}},
		11: {ppid: 10, cpuTicks: cpuTicks{all: 7, sys: 3}},   // nginx worker
		12: {ppid: 11, cpuTicks: cpuTicks{all: 1}},           // its child
		13: {ppid: 1, cpuTicks: cpuTicks{all: 100, sys: 50}}, // someone else
	}
	if got, ok := table.treeTicks(10); !ok || got != (cpuTicks{all: 13, sys: 5}) {
		t.Errorf("treeTicks(10) = %+v, %v; want 13 ticks, 5 of them in the kernel, true", got, ok)
	}
	if _, ok := table.treeTicks(99); ok {
		t.Error("a process that is gone is reported present")
	}
}

func TestParseCPUTimes(t *testing.T) {
	stat := `cpu  300 10 60 1000 5 0 7 2 40 0
cpu0 100 0 20 500 5 0 5 1 40 0
cpu1 200 10 40 500 0 0 2 1 0 0
intr 12345 0 0
ctxt 999
`
	got := parseCPUTimes(stat)
	want := map[string]cpuTimes{
		// guest (40) is already inside user and is not counted twice.
		"cpu":  {busy: 379, tasks: 370, total: 1384},
		"cpu0": {busy: 126, tasks: 120, total: 631},
		"cpu1": {busy: 253, tasks: 250, total: 753},
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %+v, want %+v", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d lines, want %d: %v", len(got), len(want), got)
	}
	after := parseCPUTimes("cpu1 300 10 40 600 0 0 2 1 0 0\n")
	if share := busyShare(got, after, 1); math.Abs(share-0.5) > 1e-9 {
		t.Errorf("busy share = %v, want 0.5", share)
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=1200,usec=54000,usec_per_call=45.00,rejected_calls=0,failed_calls=3\r\n" +
		"cmdstat_info:calls=7,usec=300,usec_per_call=42.86,rejected_calls=0,failed_calls=0\r\n"
	got := parseCommandStats(info)
	if got["evalsha"] != (commandStat{calls: 1200, micros: 54000}) {
		t.Errorf("evalsha = %+v", got["evalsha"])
	}
	if got["info"].calls != 7 {
		t.Errorf("info = %+v", got["info"])
	}
	if _, ok := got["script"]; ok {
		t.Error("a command never called is reported")
	}
}

func TestParseWrk(t *testing.T) {
	tests := []struct {
		name string
		out  string
		want loadResult
	}{
		{
			name: "a clean run gives its count, rate and percentiles",
			out: `Running 1s test @ http://127.0.0.1:18777/
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   148.22us  303.02us   4.48ms   96.25%
    Req/Sec    31.45k     3.84k   35.61k    60.00%
  Latency Distribution
     50%   95.00us
     75%  114.00us
     90%  157.00us
     99%    1.60ms
  31267 requests in 1.00s, 4.29MB read
Requests/sec:  31172.49
Transfer/sec:      4.28MB
`,
			want: loadResult{requests: 31267, seconds: 1, perSecond: 31172.49, p50: 95 * time.Microsecond, p99: 1600 * time.Microsecond},
		},
		{
			name: "non-2xx answers and socket errors are counted",
			out: `Running 8s test @ http://127.0.0.1:40000/
  1 threads and 512 connections
  Latency Distribution
     50%   12.50ms
     75%   20.00ms
     90%   31.00ms
     99%    1.02s
  160000 requests in 8.00s, 40.00MB read
  Socket errors: connect 0, read 3, write 0, timeout 2
  Non-2xx or 3xx responses: 159990
Requests/sec:  20000.00
Transfer/sec:      5.00MB
`,
			want: loadResult{requests: 160000, seconds: 8, perSecond: 20000, p50: 12500 * time.Microsecond, p99: 1020 * time.Millisecond, non2xx: 159990, errors: 5},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseWrk(tt.out)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
	t.Run("a run that completed nothing is an error", func(t *testing.T) {
		if _, err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused\n"); err == nil {
			t.Error("no error")
		}
	})
}

func TestMedianIgnoresNaN(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want float64
	}{
		{"an odd count gives the middle value", []float64{3, 1, 2}, 2},
		{"an even count gives the mean of the two middle values", []float64{4, 1, 3, 2}, 2.5},
		{"NaN values are left out", []float64{math.NaN(), 5, 1, 3}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := median(tt.xs); got != tt.want {
				t.Errorf("median(%v) = %v, want %v", tt.xs, got, tt.want)
			}
		})
	}
	t.Run("only NaN gives NaN", func(t *testing.T) {
		if got := median([]float64{math.NaN()}); !math.IsNaN(got) {
			t.Errorf("got %v", got)
		}
	})
}
