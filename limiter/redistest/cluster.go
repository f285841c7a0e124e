package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartClusterWithReplicas starts three masters and a replica of each,
// with a cluster-node-timeout of one second so that a replica takes over
// from a dead master within a few seconds, and waits until every replica
// has synchronised.
func StartClusterWithReplicas(t testing.TB) *Cluster {
	t.Helper()
	need(t)
	var all []*Server
	for range 6 {
		all = append(all, Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"))
	}
	args := []string{"--cluster", "create"}
	for _, s := range all {
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c := &Cluster{}
	ctx := context.Background()
	for _, s := range all {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr})
		ok := false
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				continue
			}
			repl, err := cl.Info(ctx, "replication").Result()
			if err != nil {
				continue
			}
			if strings.Contains(repl, "role:master") {
				ok = true
				break
			}
			if strings.Contains(repl, "master_link_status:up") {
				ok = true
				break
			}
		}
		role, _ := cl.Info(ctx, "replication").Result()
		cl.Close()
		if !ok {
			t.Fatalf("cluster node %s never reached cluster_state:ok with its replication up", s.Addr)
		}
		if strings.Contains(role, "role:master") {
			c.Nodes = append(c.Nodes, s)
		} else {
			c.Replicas = append(c.Replicas, s)
		}
	}
	if len(c.Nodes) != 3 || len(c.Replicas) != 3 {
		t.Fatalf("%d masters and %d replicas, want 3 and 3", len(c.Nodes), len(c.Replicas))
	}
	return c
}

// server is the node of c listening on addr ("host:port"), nil if none.
func (c *Cluster) server(addr string) *Server {
	for _, s := range append(append([]*Server{}, c.Nodes...), c.Replicas...) {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// ID is the cluster node ID of s.
func (c *Cluster) ID(t testing.TB, s *Server) string {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer cl.Close()
	id, err := cl.ClusterMyID(context.Background()).Result()
	if err != nil {
		t.Fatalf("CLUSTER MYID on %s: %v", s.Addr, err)
	}
	return id
}

// Slot is the hash slot of key.
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: c.Nodes[0].Addr, MaxRetries: -1})
	defer cl.Close()
	slot, err := cl.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT: %v", err)
	}
	return int(slot)
}

// Owner is the master that serves slot, as the first master that answers
// sees the Cluster.
func (c *Cluster) Owner(t testing.TB, slot int) *Server {
	t.Helper()
	for _, from := range append(append([]*Server{}, c.Nodes...), c.Replicas...) {
		for _, sh := range c.shards(from) {
			for _, r := range sh.Slots {
				if int(r.Start) > slot || slot > int(r.End) {
					continue
				}
				for _, n := range sh.Nodes {
					if n.Role == "master" && n.Health == "online" {
						if s := c.server(fmt.Sprintf("%s:%d", n.IP, n.Port)); s != nil {
							return s
						}
					}
				}
			}
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return nil
}

// Range is the first and last slot of the range that slot's owner serves
// around it.
func (c *Cluster) Range(t testing.TB, slot int) (first, last int) {
	t.Helper()
	for _, sh := range c.shards(c.Nodes[0]) {
		for _, r := range sh.Slots {
			if int(r.Start) <= slot && slot <= int(r.End) {
				return int(r.Start), int(r.End)
			}
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return 0, 0
}

// shards is CLUSTER SHARDS as from sees it; nil when it does not answer.
func (c *Cluster) shards(from *Server) []redis.ClusterShard {
	cl := redis.NewClient(&redis.Options{Addr: from.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: time.Second})
	defer cl.Close()
	shards, err := cl.ClusterShards(context.Background()).Result()
	if err != nil {
		return nil
	}
	return shards
}

// ReplicaOf is the replica of master.
func (c *Cluster) ReplicaOf(t testing.TB, master *Server) *Server {
	t.Helper()
	id := c.ID(t, master)
	for _, r := range c.Replicas {
		cl := redis.NewClient(&redis.Options{Addr: r.Addr, MaxRetries: -1})
		repl, err := cl.Info(context.Background(), "replication").Result()
		cl.Close()
		if err == nil && strings.Contains(repl, "master_port:"+strconv.Itoa(master.Port)+"\r\n") {
			return r
		}
	}
	t.Fatalf("no replica of %s (%s)", master.Addr, id)
	return nil
}

// MigrateSlot moves slot and its keys from one master to another the way
// redis-cli --cluster reshard does, one step at a time: IMPORTING on the
// target, MIGRATING on the source, MIGRATE of every key, then NODE on every
// master. halfway, when not nil, runs after the keys have moved and before
// the slot changes hands: while it runs the source answers ASK for every
// key of the slot.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, from, to *Server, halfway func()) {
	t.Helper()
	ctx := context.Background()
	fromID, toID := c.ID(t, from), c.ID(t, to)
	src := redis.NewClient(&redis.Options{Addr: from.Addr, MaxRetries: -1})
	defer src.Close()
	dst := redis.NewClient(&redis.Options{Addr: to.Addr, MaxRetries: -1})
	defer dst.Close()
	must := func(what string, err error) {
		if err != nil {
			t.Fatalf("slot %d from %s to %s: %s: %v", slot, from.Addr, to.Addr, what, err)
		}
	}
	must("IMPORTING", dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID).Err())
	must("MIGRATING", src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID).Err())
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, 100).Result()
		must("GETKEYSINSLOT", err)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.Port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		must("MIGRATE", src.Do(ctx, args...).Err())
	}
	if halfway != nil {
		halfway()
	}
	// The target first, then the source, as redis-cli does: the source's
	// ASK then never points at a node that does not yet own the slot.
	must("NODE on the target", setSlotNode(ctx, dst, slot, toID))
	must("NODE on the source", setSlotNode(ctx, src, slot, toID))
	for _, n := range c.Nodes {
		if n == from || n == to {
			continue
		}
		cl := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		err := setSlotNode(ctx, cl, slot, toID)
		cl.Close()
		must(fmt.Sprintf("NODE on %s", n.Addr), err)
	}
}

func setSlotNode(ctx context.Context, c *redis.Client, slot int, id string) error {
	return c.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", id).Err()
}
