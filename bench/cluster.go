package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// shard is one master of the Cluster.
type shard struct {
	addr        string
	first, last int // its slots
	proc        *process
	client      *redis.Client
	idleCores   float64 // CPU it spends with no load, in cores
}

// slotRanges splits the Cluster's slots into n ranges as even as whole
// slots allow.
func slotRanges(n int) [][2]int {
	var out [][2]int
	for i := range n {
		out = append(out, [2]int{i * clusterSlots / n, (i+1)*clusterSlots/n - 1})
	}
	return out
}

// startCluster starts scaleShards redis-servers with cluster-enabled on
// the load CPU, gives each its range of slots, joins them and waits until
// every one says cluster_state:ok.
func (h *harness) startCluster(ctx context.Context) ([]*shard, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("-mode scale needs redis-server")
	}
	var shards []*shard
	var busPorts []int
	for i, slots := range slotRanges(scaleShards) {
		port, err1 := freePort()
		bus, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if bus == port {
			return nil, errors.New("pick a free port: got one twice")
		}
		dir := filepath.Join(h.dir, fmt.Sprintf("shard-%d", i+1))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
		p, err := h.start(fmt.Sprintf("redis-shard-%d", i+1), h.pin.argv(loadCPU, bin,
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", strconv.Itoa(bus)),
			filepath.Join(dir, "redis.log"))
		if err != nil {
			return nil, err
		}
		s := &shard{addr: "127.0.0.1:" + strconv.Itoa(port), first: slots[0], last: slots[1], proc: p}
		s.client = redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
		shards = append(shards, s)
		busPorts = append(busPorts, bus)
		if err := pollUntil(ctx, p, 10*time.Second, func() error { return s.client.Ping(ctx).Err() }); err != nil {
			return shards, fmt.Errorf("redis-server on %s does not answer: %w", s.addr, err)
		}
	}
	for i, s := range shards {
		if err := s.client.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", s.first, s.last).Err(); err != nil {
			return shards, fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", s.addr, err)
		}
		if i > 0 {
			port, _ := strconv.Atoi(strings.TrimPrefix(s.addr, "127.0.0.1:"))
			if err := shards[0].client.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", port, busPorts[i]).Err(); err != nil {
				return shards, fmt.Errorf("CLUSTER MEET %s: %w", s.addr, err)
			}
		}
	}
	for _, s := range shards {
		err := pollUntil(ctx, s.proc, 20*time.Second, func() error {
			info, err := s.client.ClusterInfo(ctx).Result()
			if err == nil && !strings.Contains(info, "cluster_state:ok") {
				err = errors.New("cluster_state is not ok")
			}
			return err
		})
		if err != nil {
			return shards, fmt.Errorf("cluster node %s: %w", s.addr, err)
		}
	}
	version, _ := shards[0].client.Info(ctx, "server").Result()
	if v := infoFields(version)["redis_version"]; v != "" {
		h.environment = append(h.environment, "redis "+v)
	}
	return shards, nil
}

// pollUntil calls try every 50 ms until it succeeds, p exits or within
// passes.
func pollUntil(ctx context.Context, p *process, within time.Duration, try func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := try()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited: %v:%s", p.name, p.waitErr, p.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return err
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// scriptCommands are the commands the gateway's scripts run, in the
// lower case of INFO commandstats, from the redis.call and redis.pcall
// of the Lua files in dir.
func scriptCommandsIn(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.lua"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("the gateway's scripts in %s: none found (%v)", dir, err)
	}
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, n := range commandsCalled(string(b)) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

var redisCall = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)

// commandsCalled are the commands a Lua source names in redis.call or
// redis.pcall, lower case.
func commandsCalled(src string) []string {
	var names []string
	for _, m := range redisCall.FindAllStringSubmatch(src, -1) {
		if n := strings.ToLower(m[1]); !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// infoFields are the "key:value" lines of an INFO reply.
func infoFields(info string) map[string]string {
	out := map[string]string{}
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// infoCPUSeconds is redis-server's own CPU time from INFO cpu: user and
// system, every thread, without its children (a fork to save).
func infoCPUSeconds(info string) (float64, error) {
	f := infoFields(info)
	user, err1 := strconv.ParseFloat(f["used_cpu_user"], 64)
	sys, err2 := strconv.ParseFloat(f["used_cpu_sys"], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return user + sys, nil
}

// pingMicros is what a PING costs the shard in CPU, in µs, sent 20,000
// times over 8 connections in pipelines of pipeline: the part of any
// call that is not its command (reading, parsing, replying, the event
// loop), shared by the calls of a pipeline. Its idle CPU is left out.
func (s *shard) pingMicros(ctx context.Context, pipeline int) (float64, error) {
	const conns, calls = 8, 20_000
	client := redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: conns, MaxRetries: -1})
	defer client.Close()
	cpu := func() (float64, error) { return infoCPUSeconds(client.Info(ctx, "cpu").Val()) }
	before, err := cpu()
	if err != nil {
		return 0, err
	}
	started := time.Now()
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			for range calls / conns / pipeline {
				_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
					for range pipeline {
						p.Ping(ctx)
					}
					return nil
				})
				if err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	after, err := cpu()
	if err := errors.Join(append(errs, err)...); err != nil {
		return 0, fmt.Errorf("PING %s: %w", s.addr, err)
	}
	return (after - before - s.idleCores*time.Since(started).Seconds()) * 1e6 / calls, nil
}
