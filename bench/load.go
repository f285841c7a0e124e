package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// loadResult is one load run as the load generator saw it.
type loadResult struct {
	requests  int64   // completed
	seconds   float64 // how long the generator ran
	perSecond float64
	p50, p99  time.Duration
	non2xx    int64 // answers with a status of 400 or more
	errors    int64 // socket errors: connect, read, write, timeout
	// cpuSeconds is the generator's own CPU time, from its rusage.
	cpuSeconds float64
}

// loader drives one URL with a fixed number of keep-alive connections.
// With subjects above 1 each request comes from the next of that many
// client addresses (10.0.0.0, 10.0.0.1, ... in turn, from the from-th),
// named in X-Forwarded-For: the gateway must trust the load side as a
// proxy.
type loader struct {
	name  string // for the report: "wrk ..." or the Go generator
	argv  func(url string, conns int, d time.Duration, subjects, from int, dir string) ([]string, error)
	parse func(stdout string) (loadResult, error)
	dir   string // the harness's temporary folder, for wrk's script
}

// rotatedAddr is the i-th client address of a rotation.
func rotatedAddr(i int) string {
	return fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
}

// maxSubjects is the most client addresses a rotation has: 10.0.0.0/8.
const maxSubjects = 1 << 24

// wrkRotation is wrk's script for a rotation of subjects addresses: a
// request is wrk's own prepared one with the header added by a few
// concatenations, which costs wrk about what its own request does.
const wrkRotation = `-- Written by go run ./bench: request i comes from client address (%[2]d + i) mod %[1]d, named in X-Forwarded-For.
local n = %[1]d
local i = %[2]d
local head
init = function(args)
  -- wrk's request without its last CRLF, the end of its header block
  head = string.sub(wrk.format(), 1, -3) .. "X-Forwarded-For: 10."
end
request = function()
  local a = i
  i = i + 1
  if i == n then i = 0 end
  return head .. math.floor(a / 65536) %% 256 .. "." .. math.floor(a / 256) %% 256 .. "." .. a %% 256 .. "\r\n\r\n"
end
`

// newLoader picks wrk unless the harness is told otherwise or wrk is
// missing; the Go generator is the harness itself in the internal-load
// role.
func newLoader(choice string) (loader, string, error) {
	self, err := os.Executable()
	if err != nil {
		return loader{}, "", err
	}
	goLoader := loader{
		name: "the harness's Go load generator (fixed connections, keep-alive)",
		argv: func(url string, conns int, d time.Duration, subjects, from int, dir string) ([]string, error) {
			return []string{self, "internal-load", "-url", url, "-c", strconv.Itoa(conns), "-d", d.String(),
				"-subjects", strconv.Itoa(max(subjects, 1)), "-from", strconv.Itoa(from)}, nil // the hot key: 0 here, 1 (no header) there
		},
		parse: parseGoLoad,
	}
	if choice == "go" {
		return goLoader, "", nil
	}
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		if choice == "wrk" {
			return loader{}, "", errors.New("-loader wrk: wrk is not installed")
		}
		return goLoader, "wrk is not installed: the load comes from the harness's Go generator, whose own cost per request is higher than wrk's, so compare its numbers only with each other", nil
	}
	return loader{
		name: wrkVersion(wrk) + " (-t1)",
		argv: func(url string, conns int, d time.Duration, subjects, from int, dir string) ([]string, error) {
			seconds := int(math.Ceil(d.Seconds()))
			argv := []string{wrk, "-t1", "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(seconds) + "s", "--timeout", "10s", "--latency"}
			if subjects > 1 {
				script, err := writeWrkRotation(dir, subjects, from)
				if err != nil {
					return nil, err
				}
				argv = append(argv, "-s", script)
			}
			return append(argv, url), nil
		},
		parse: parseWrk,
	}, "", nil
}

func wrkVersion(path string) string {
	// wrk prints its version with the usage text and exits 1.
	out, _ := exec.Command(path, "--version").CombinedOutput()
	first, _, _ := strings.Cut(string(out), "\n")
	first, _, _ = strings.Cut(first, " [")
	first, _, _ = strings.Cut(first, " Copyright")
	if first == "" {
		return "wrk"
	}
	return first
}

// writeWrkRotation writes wrk's script for a rotation of subjects
// addresses, starting at the from-th, into dir, once, and returns its
// path.
func writeWrkRotation(dir string, subjects, from int) (string, error) {
	from %= subjects
	path := filepath.Join(dir, fmt.Sprintf("rotation-%d-from-%d.lua", subjects, from))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	return path, os.WriteFile(path, []byte(fmt.Sprintf(wrkRotation, subjects, from)), 0o644)
}

// run drives t at conns connections on the load CPU for d and returns
// what the generator reported.
func (l loader) run(ctx context.Context, pin pinning, t *target, conns int, d time.Duration) (loadResult, error) {
	url := t.url
	largv, err := l.argv(url, conns, d, t.subjects, t.rotationFrom, l.dir)
	if err != nil {
		return loadResult{}, err
	}
	argv := pin.argv(loadCPU, largv...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return loadResult{}, ctx.Err()
		}
		return loadResult{}, fmt.Errorf("load %s: %w: %s%s", url, err, stderr.String(), stdout.String())
	}
	r, err := l.parse(stdout.String())
	if err != nil {
		return r, fmt.Errorf("load %s: %w\n%s", url, err, stdout.String())
	}
	r.cpuSeconds = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return r, nil
}

// parseWrk reads wrk's report (run with --latency).
func parseWrk(out string) (loadResult, error) {
	var r loadResult
	var err error
	inDistribution := false
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case len(f) >= 2 && f[0] == "Latency" && f[1] == "Distribution":
			inDistribution = true
		case inDistribution && len(f) == 2 && strings.HasSuffix(f[0], "%"):
			var d time.Duration
			if d, err = time.ParseDuration(f[1]); err != nil {
				return r, fmt.Errorf("wrk latency %q: %w", line, err)
			}
			switch f[0] {
			case "50%", "50.000%":
				r.p50 = d
			case "99%", "99.000%":
				r.p99 = d
			}
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			inDistribution = false
			if r.requests, err = strconv.ParseInt(f[0], 10, 64); err != nil {
				return r, fmt.Errorf("wrk request count %q: %w", line, err)
			}
			d, err := time.ParseDuration(strings.TrimSuffix(f[3], ","))
			if err != nil {
				return r, fmt.Errorf("wrk run time %q: %w", line, err)
			}
			r.seconds = d.Seconds()
		case f[0] == "Non-2xx":
			if r.non2xx, err = strconv.ParseInt(f[len(f)-1], 10, 64); err != nil {
				return r, fmt.Errorf("wrk non-2xx %q: %w", line, err)
			}
		case len(f) >= 2 && f[0] == "Socket" && f[1] == "errors:":
			// Socket errors: connect 0, read 0, write 0, timeout 0
			for i := 3; i < len(f); i += 2 {
				n, err := strconv.ParseInt(strings.TrimSuffix(f[i], ","), 10, 64)
				if err != nil {
					return r, fmt.Errorf("wrk socket errors %q: %w", line, err)
				}
				r.errors += n
			}
		case f[0] == "Requests/sec:" && len(f) == 2:
			if r.perSecond, err = strconv.ParseFloat(f[1], 64); err != nil {
				return r, fmt.Errorf("wrk requests/sec %q: %w", line, err)
			}
		}
	}
	if r.requests == 0 || r.seconds == 0 {
		return r, errors.New("wrk reported no completed requests")
	}
	if r.perSecond == 0 {
		r.perSecond = float64(r.requests) / r.seconds
	}
	return r, nil
}

func parseGoLoad(out string) (loadResult, error) {
	var g goLoadResult
	if err := json.Unmarshal([]byte(out), &g); err != nil {
		return loadResult{}, fmt.Errorf("output of the Go load generator: %w", err)
	}
	if g.Requests == 0 || g.Seconds == 0 {
		return loadResult{}, errors.New("the Go load generator completed no requests")
	}
	return loadResult{
		requests:  g.Requests,
		seconds:   g.Seconds,
		perSecond: float64(g.Requests) / g.Seconds,
		p50:       time.Duration(g.P50Micros) * time.Microsecond,
		p99:       time.Duration(g.P99Micros) * time.Microsecond,
		non2xx:    g.Non2xx,
		errors:    g.Errors,
	}, nil
}
