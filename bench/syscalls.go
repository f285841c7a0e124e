package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// syscallEvent is the tracepoint perf counts: every system call entered.
const syscallEvent = "raw_syscalls:sys_enter"

// findPerf returns the perf binary when it can count syscallEvent here
// (installed, and the kernel's tracepoints readable), or why not.
func findPerf(dir string) (string, error) {
	path, err := exec.LookPath("perf")
	if err != nil {
		return "", errors.New("perf is not installed (Debian: linux-perf)")
	}
	out := filepath.Join(dir, "perf-check.csv")
	if msg, err := exec.Command(path, "stat", "-x,", "-e", syscallEvent, "-o", out, "--", "true").CombinedOutput(); err != nil {
		return "", fmt.Errorf("perf stat -e %s: %v: %s", syscallEvent, err, strings.TrimSpace(string(msg)))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return "", err
	}
	if _, err := parsePerfCount(string(b), syscallEvent); err != nil {
		return "", err
	}
	return path, nil
}

// syscallCount is perf stat counting the system calls of a target's
// processes while it runs.
type syscallCount struct {
	p   *process
	out string
}

// countSyscalls starts perf stat on t's process tree as it is now (nginx's
// worker is the master's child), on the load CPU.
func (h *harness) countSyscalls(t *target) (*syscallCount, error) {
	table, err := readProcessTable()
	if err != nil {
		return nil, err
	}
	var pids []string
	for _, pid := range table.tree(t.proc.pid()) {
		pids = append(pids, strconv.Itoa(pid))
	}
	if pids == nil {
		return nil, fmt.Errorf("%s is gone:%s", t.name, t.proc.logTail())
	}
	out := filepath.Join(h.dir, "syscalls-"+t.name+".csv")
	os.Remove(out)
	argv := h.pin.argv(loadCPU, h.perf, "stat", "-x,", "-e", syscallEvent, "-p", strings.Join(pids, ","), "-o", out)
	p, err := h.start("perf", argv, filepath.Join(h.dir, "perf.log"))
	if err != nil {
		return nil, err
	}
	// perf attaches before it counts; a request sent before that would
	// go uncounted.
	time.Sleep(100 * time.Millisecond)
	return &syscallCount{p: p, out: out}, nil
}

// stop ends the count and returns it.
func (c *syscallCount) stop() (float64, error) {
	c.p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.p.exited:
	case <-time.After(5 * time.Second):
		c.p.stop()
		return 0, errors.New("perf stat did not stop on SIGINT")
	}
	b, err := os.ReadFile(c.out)
	if err != nil {
		return 0, fmt.Errorf("perf stat: %w:%s", err, c.p.logTail())
	}
	return parsePerfCount(string(b), syscallEvent)
}

// parsePerfCount finds event's count in perf stat's -x, output
// (value,unit,event,...).
func parsePerfCount(out, event string) (float64, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 3 || f[2] != event {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, fmt.Errorf("perf stat counted no %s: %q", event, f[0])
		}
		return v, nil
	}
	return 0, fmt.Errorf("perf stat printed no %s", event)
}
