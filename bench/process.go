package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The two cores of the measurement: the proxy under test has CPU 0 to
// itself; the load generator, the upstream and redis-server share CPU 1.
const (
	proxyCPU = 0
	loadCPU  = 1
)

// process is a child the harness started in a process group of its own, so
// that stopping it also stops whatever it forked (nginx's worker), and so
// that a Ctrl-C at the terminal reaches only the harness, which then stops
// its children in order.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string // its stdout and stderr, appended
	exited  chan struct{}
	waitErr error
}

// start runs argv with stdout and stderr appended to logPath. The child is
// killed by the kernel if the harness dies without cleaning up.
func (h *harness) start(name string, argv []string, logPath string) (*process, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	// O_APPEND lets the harness truncate the file between runs while the
	// child keeps writing to it.
	defer log.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	h.procs = append(h.procs, p)
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM to the process group, then SIGKILL if it has not
// exited within three seconds.
func (p *process) stop() {
	pgid := p.pid()
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(3 * time.Second):
	}
	// Whatever the leader left behind in its group goes too.
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.exited
}

// logTail is the end of the process's log, for error messages.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\n    " + strings.Join(lines, "\n    ")
}

// pinning prefixes commands with taskset when it can.
type pinning struct {
	taskset string // empty: no pinning
	why     string // why not, when taskset is empty
}

func newPinning() pinning {
	if runtime.NumCPU() < 2 {
		return pinning{why: fmt.Sprintf("only %d CPU: nothing is pinned, proxy and load share it", runtime.NumCPU())}
	}
	path, err := exec.LookPath("taskset")
	if err != nil {
		return pinning{why: "taskset is not installed: nothing is pinned"}
	}
	return pinning{taskset: path}
}

func (p pinning) argv(cpu int, argv ...string) []string {
	if p.taskset == "" {
		return argv
	}
	return append([]string{p.taskset, "-c", strconv.Itoa(cpu)}, argv...)
}

// freePort is a loopback port nobody listens on right now.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if port == 6379 {
		// Never, since someone listens there; but that Redis is not ours.
		return 0, fmt.Errorf("pick a free port: got 6379")
	}
	return port, nil
}

func freeAddr() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

// waitHTTP polls url until ready accepts its status, the process exits or
// the timeout passes.
func waitHTTP(ctx context.Context, p *process, url string, ready func(status int) bool, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if ready(resp.StatusCode) {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited (%v) before %s answered:%s", p.name, p.waitErr, url, p.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready at %s after %s (last: %s):%s", p.name, url, timeout, last, p.logTail())
		}
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
