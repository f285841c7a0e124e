// Package redistest starts private redis-server processes for tests: on
// free loopback ports, with no persistence, stopped by t.Cleanup. It never
// touches a Redis it did not start. Without redis-server on PATH the test
// is skipped, except under CI=true, where that is a failure.
package redistest

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process.
type Server struct {
	Addr string
	Port int
	// TLS is the client configuration for a server started by StartTLS.
	TLS *tls.Config
	// CAFile is the PEM file of the root that signed a TLS server's
	// certificate.
	CAFile string
	dir    string
	args   []string
	mu     sync.Mutex
	cmd    *exec.Cmd
	t      testing.TB
}

// need skips or fails when redis-server is missing.
func need(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not installed; CI must install it (.ci/run does)")
		}
		t.Skip("redis-server is not installed; skipping the tests that need a real Redis")
	}
	return path
}

// FreePort returns a loopback port nobody listens on right now.
//
// The port is drawn below the kernel's ephemeral range (32768 and up on
// Linux), where nothing that binds port 0 or dials out can take it between
// this check and its use by the process it is for. A Cluster node's bus
// port (port + 10000) is below that range too, and free as well.
func FreePort(t testing.TB) int {
	t.Helper()
	free := func(port int) bool {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	for range 200 {
		port := 10000 + mrand.IntN(12768)
		if free(port) && free(port+10000) {
			return port
		}
	}
	t.Fatal("no free port pair (port, port+10000) between 10000 and 32767 in 200 tries")
	return 0
}

// Start starts a redis-server with extra arguments and waits until it answers.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	need(t)
	port := FreePort(t)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: t.TempDir(), t: t}
	s.args = append([]string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning",
	}, extra...)
	s.start()
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	log, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("redis-%d.log", time.Now().UnixNano())))
	if err == nil {
		cmd.Stdout, cmd.Stderr = log, log
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	s.mu.Unlock()
	s.waitReady()
}

func (s *Server) waitReady() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, TLSConfig: s.TLS})
	defer c.Close()
	answered := poll(10*time.Second, 20*time.Millisecond, func() bool {
		err := c.Ping(context.Background()).Err()
		return err == nil || strings.HasPrefix(err.Error(), "NOAUTH") || strings.HasPrefix(err.Error(), "WRONGPASS")
	})
	if !answered {
		s.t.Fatalf("redis-server on %s did not answer", s.Addr)
	}
}

// Kill stops the process (SIGKILL: no chance to say goodbye).
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the killed process again on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// Client is an administrative client of the default user.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: s.TLS})
	t.Cleanup(func() { c.Close() })
	return c
}

// UsedMemory is used_memory from INFO memory: what Redis counts against
// maxmemory, in bytes.
func (s *Server) UsedMemory(t testing.TB) int64 {
	t.Helper()
	info, err := s.Client(t).Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatalf("INFO memory: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return n
			}
		}
	}
	t.Fatalf("INFO memory without used_memory: %q", info)
	return 0
}

// StartTLS starts a redis-server that speaks TLS only, with a certificate
// for 127.0.0.1 signed by a fresh test CA.
func StartTLS(t testing.TB) *Server {
	t.Helper()
	need(t)
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile := write("ca.pem", "CERTIFICATE", caDER)
	certFile := write("redis.pem", "CERTIFICATE", leafDER)
	keyFile := write("redis.key", "EC PRIVATE KEY", keyDER)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)

	port := FreePort(t)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, t: t, CAFile: caFile,
		TLS: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	s.args = []string{
		"--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
	}
	s.start()
	t.Cleanup(s.Kill)
	return s
}

// Cluster is a 3-master Redis Cluster.
type Cluster struct {
	Nodes []*Server // the masters, as started
	// Replicas, one of each master, by StartClusterWithReplicas only.
	Replicas []*Server
}

// Addrs are the masters' addresses.
func (c *Cluster) Addrs() []string { return addrs(c.Nodes) }

// addrs are the servers' addresses.
func addrs(servers []*Server) []string {
	var a []string
	for _, n := range servers {
		a = append(a, n.Addr)
	}
	return a
}

// StartCluster starts three masters and joins them with redis-cli.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	need(t)
	c := &Cluster{}
	for i := 0; i < 3; i++ {
		c.Nodes = append(c.Nodes, Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr})
		ok := poll(15*time.Second, 50*time.Millisecond, func() bool {
			info, err := cl.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		cl.Close()
		if !ok {
			t.Fatalf("cluster node %s never reached cluster_state:ok", n.Addr)
		}
	}
	return c
}

// poll asks cond every interval until it holds, for within at most, and
// says whether it held.
func poll(within, interval time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(interval) {
		if cond() {
			return true
		}
	}
	return false
}

// Sentinel is a master, a replica and three sentinels watching them.
type Sentinel struct {
	Master, Replica *Server
	Sentinels       []*Server
	MasterName      string
}

// SentinelAddrs are the sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string { return addrs(s.Sentinels) }

// StartSentinel starts the group and waits until every sentinel knows the
// master and its replica.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	need(t)
	g := &Sentinel{MasterName: "gwmaster"}
	g.Master = Start(t)
	g.Replica = Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(g.Master.Port))
	for i := 0; i < 3; i++ {
		port := FreePort(t)
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		src := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\nsentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\nsentinel parallel-syncs %s 1\n",
			port, dir, g.MasterName, g.Master.Port, g.MasterName, g.MasterName, g.MasterName)
		if err := os.WriteFile(conf, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, t: t, args: []string{conf, "--sentinel"}}
		s.start()
		t.Cleanup(s.Kill)
		g.Sentinels = append(g.Sentinels, s)
	}
	for _, s := range g.Sentinels {
		c := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		ok := poll(20*time.Second, 100*time.Millisecond, func() bool {
			replicas, err := c.Replicas(context.Background(), g.MasterName).Result()
			return err == nil && len(replicas) > 0
		})
		c.Close()
		if !ok {
			t.Fatalf("sentinel %s never saw the replica", s.Addr)
		}
	}
	return g
}

// Proxy is a TCP proxy in front of a Redis: it forwards every command and,
// while dropping, swallows the next reply and cuts the connection, so the
// client never learns what the command did.
type Proxy struct {
	Addr     string
	ln       net.Listener
	target   string
	mu       sync.Mutex
	dropNext bool
	dropped  int
	hang     bool
}

// Hang makes the proxy swallow every reply, keeping connections open, until
// Resume: a Redis that accepts commands and never answers.
func (p *Proxy) Hang() {
	p.mu.Lock()
	p.hang = true
	p.mu.Unlock()
}

// Resume ends Hang.
func (p *Proxy) Resume() {
	p.mu.Lock()
	p.hang = false
	p.mu.Unlock()
}

// StartProxy starts a proxy to target.
func StartProxy(t testing.TB, target string) *Proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), ln: ln, target: target}
	t.Cleanup(func() { ln.Close() })
	go p.accept()
	return p
}

// DropNextReply makes the next reply from Redis vanish.
func (p *Proxy) DropNextReply() {
	p.mu.Lock()
	p.dropNext = true
	p.mu.Unlock()
}

// Dropped counts the replies dropped so far.
func (p *Proxy) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				server.Write(buf[:n])
			}
			if err != nil {
				server.Close()
				return
			}
		}
	}()
	r := bufio.NewReader(server)
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.mu.Lock()
			drop, hang := p.dropNext, p.hang
			if drop {
				p.dropNext = false
				p.dropped++
			}
			p.mu.Unlock()
			if drop {
				return // the reply is gone and so is the connection
			}
			if hang {
				continue
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Blackhole accepts connections and never answers.
func Blackhole(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return ln.Addr().String()
}
