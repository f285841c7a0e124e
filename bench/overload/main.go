// Command overload shows what an upstream's overload block does for a
// legacy backend: it builds the gateway, starts a loopback model of the
// backend (internal/legacymodel: 8 workers at 20 ms a request, a FIFO in
// front of them), and offers it three times its capacity for -duration
// through the gateway from tenants of every priority, one of them
// flooding; once with the overload block and once without, and prints a
// markdown table of the two side by side. With the block, it then halves
// the backend's workers and times the limit's fall, and gives them back
// and times its rise.
//
//	go run ./bench/overload                  # 30 s of load each way
//	go run ./bench/overload -duration 10s
//
// The gateway runs as its own process from a file the command writes;
// the backend and the load run in this one. The CI test of the same
// scenario, shorter, is proxy's TestOverloadProtectsALegacyBackend.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgegate/gateway/internal/legacymodel"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench/overload:", err)
		os.Exit(1)
	}
}

// overloadBlock is the block of the run with one; its queue_timeout is
// the clients' wait at most for a slot.
const overloadBlock = `
  overload {
    adaptive      = true
    min_limit     = 4
    max_in_flight = 64
    queue         = 64
    queue_timeout = "500ms"
  }`

// variant is one run: the gateway with or without the block.
type variant struct {
	name  string
	block string
}

// outcome is what one run measured.
type outcome struct {
	variant
	unloaded         time.Duration
	idleP50, idleP99 time.Duration // of the idle route during the load
	results          []legacymodel.Result
	measured         time.Duration
	capacity         float64 // the backend's requests a second, every worker at 20 ms
	effective        float64 // the backend's requests a second as it ran
	limitLo, limitHi float64
	limitMedian      float64
	fall, rise       time.Duration // -1: did not within 5 s
	fallTo, riseTo   float64
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("overload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 30*time.Second, "measured load of each run")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured load before it")
	repo := fs.String("repo", ".", "a folder inside the gateway module")
	patience := fs.Duration("patience", 2*time.Second, "how long a client waits for an answer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "bench-overload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "gateway")
	fmt.Fprintf(stderr, "building the gateway in %s\n", *repo)
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = *repo
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "pseudonym-secret.txt"), []byte("FAKE-bench-only-pseudonym-secret-not-for-any-real-gateway\n"), 0o600); err != nil {
		return err
	}
	var outcomes []outcome
	for _, v := range []variant{{"with the overload block", overloadBlock}, {"without it", ""}} {
		fmt.Fprintf(stderr, "%s: %s of load after %s of warm-up\n", v.name, *duration, *warmup)
		o, err := runVariant(v, dir, bin, *duration, *warmup, *patience)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		outcomes = append(outcomes, o)
	}
	report(stdout, outcomes, *patience)
	return nil
}

func runVariant(v variant, dir, bin string, duration, warmup, patience time.Duration) (outcome, error) {
	o := outcome{variant: v, measured: duration, fall: -1, rise: -1}
	b, err := legacymodel.NewBackend(8, 20*time.Millisecond)
	if err != nil {
		return o, err
	}
	defer b.Close()
	// An idle backend of the model's 20 ms behind the same gateway, on a
	// route of its own without a limit, asked one request at a time
	// during the load: its p99 over its median is what the machine alone
	// (other jobs, the processes of the run) adds to a request on this
	// path then.
	idle := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { time.Sleep(b.Service) })}
	il, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return o, err
	}
	go idle.Serve(il)
	defer idle.Close()
	listen, admin := freeAddr(), freeAddr()
	conf := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(conf, []byte(gatewayConfig(listen, admin, b.URL, "http://"+il.Addr().String(), v.block)), 0o644); err != nil {
		return o, err
	}
	cmd := exec.Command(bin, "run", "-config", conf)
	log, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		return o, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return o, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	base := "http://" + listen
	if err := waitReady("http://"+admin+"/readyz", 20*time.Second); err != nil {
		return o, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096}, Timeout: patience}
	defer client.CloseIdleConnections()

	var unloaded []time.Duration
	for range 50 {
		start := time.Now()
		req, _ := http.NewRequest("GET", base+"/critical", nil)
		req.Header.Set("X-Auth-Principal", "probe")
		res, err := client.Do(req)
		if err != nil {
			return o, err
		}
		res.Body.Close()
		unloaded = append(unloaded, time.Since(start))
	}
	o.unloaded = legacymodel.Percentile(unloaded, 0.5)

	limit := func() float64 { return scrape("http://"+admin+"/metrics", `gateway_upstream_limit{pool="legacy"}`) }
	load := legacymodel.Start(base, client, legacymodel.Scenario(b.Capacity()))
	defer load.Stop()
	time.Sleep(warmup)
	var limits []float64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
				limits = append(limits, limit())
			}
		}
	}()
	var noise []time.Duration
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			start := time.Now()
			if res, err := client.Get(base + "/idle"); err == nil {
				res.Body.Close()
				noise = append(noise, time.Since(start))
			}
		}
	}()
	served0, busy0 := b.Served()
	o.results = load.Measure(duration)
	served1, busy1 := b.Served()
	close(done)
	<-sampled
	<-probed
	o.idleP50, o.idleP99 = legacymodel.Percentile(noise, 0.5), legacymodel.Percentile(noise, 0.99)
	o.capacity, o.effective = b.Capacity(), b.Capacity()
	if n := served1 - served0; n > 0 {
		o.effective = b.Capacity() * float64(b.Service) / float64((busy1-busy0)/time.Duration(n))
	}
	if v.block == "" {
		return o, nil
	}
	slices.Sort(limits)
	o.limitLo, o.limitHi, o.limitMedian = limits[0], limits[len(limits)-1], limits[len(limits)/2]
	b.Halve()
	o.fall, o.fallTo = until(func(l float64) bool { return l <= 0.75*o.limitMedian }, limit)
	time.Sleep(2 * time.Second)
	b.Restore()
	o.rise, o.riseTo = until(func(l float64) bool { return l >= 0.9*o.limitMedian }, limit)
	return o, nil
}

// until polls the limit until ok, for 5 s at most: how long it took
// (-1: longer) and the limit then.
func until(ok func(float64) bool, limit func() float64) (time.Duration, float64) {
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		if l := limit(); ok(l) {
			return time.Since(start), l
		}
		time.Sleep(50 * time.Millisecond)
	}
	return -1, limit()
}

func gatewayConfig(listen, admin, backend, idle, block string) string {
	route := func(name, extra string) string {
		return fmt.Sprintf(`
route %q {
  path     = "/%s"
  upstream = "legacy"
  policy   = "generous"
  subject  = ["principal", "client_ip"]%s
}
`, name, name, extra)
	}
	return fmt.Sprintf(`# Written by go run ./bench/overload for one run; removed when it ends.
listen {
  http                       = %q
  admin                      = %q
  shutdown_timeout           = "1s"
  max_connections_per_client = 0
}

# The secret in this file is fake: it signs load-test pseudonyms only.
pseudonym {
  version = 1
  key "1" { secret = file("pseudonym-secret.txt") }
}

subject {
  trusted_proxies  = ["127.0.0.1/32"]
  principal_header = "X-Auth-Principal"
  plan_header      = "X-Auth-Plan"
}

log {
  level  = "warn"
  access = false
}

# Never reached: the tenants are told apart by their principal.
policy "generous" {
  algorithm = "fixed-window"
  limit     = 1000000000
  window    = "30m"
}

upstream "legacy" {
  targets = [%q]%s
}
%s%s%s%s`, listen, admin, backend, block,
		route("critical", "\n  priority = \"critical\""), route("default", ""), route("batch", "\n  plan_priority = { free = \"sheddable\" }"),
		fmt.Sprintf("\nroute \"idle\" {\n  path     = \"/idle\"\n  upstream = %q\n}\n", idle))
}

func report(w io.Writer, outcomes []outcome, patience time.Duration) {
	fmt.Fprintf(w, "\nA backend of 8 workers at 20 ms a request (%.0f req/s), offered 3 times that for %s; clients wait %s at most.\n\n",
		outcomes[0].capacity, outcomes[0].measured, patience)
	fmt.Fprintln(w, "| gateway | goodput | critical 2xx | critical p50 / p99 | default 2xx | flood (sheddable) | light (sheddable) | unloaded | backend as it ran | an idle route's p50 / p99 meanwhile |")
	fmt.Fprintln(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
	for _, o := range outcomes {
		secs := o.measured.Seconds()
		var ok int
		for _, r := range o.results {
			ok += r.OK
		}
		share := func(r legacymodel.Result) string {
			if r.Answered == 0 {
				return "none answered"
			}
			return fmt.Sprintf("%.1f%%", 100*float64(r.OK)/float64(r.Answered))
		}
		c, d1, d2, flood, light := o.results[0], o.results[1], o.results[2], o.results[3], o.results[4]
		d := legacymodel.Result{Answered: d1.Answered + d2.Answered, OK: d1.OK + d2.OK}
		fmt.Fprintf(w, "| %s | %.0f/s (%.0f%%) | %s | %v / %v | %s | %.0f/s | %.0f/s | %v | %.0f/s | %v |\n", o.name,
			float64(ok)/secs, 100*float64(ok)/secs/o.capacity, share(c),
			ms(legacymodel.Percentile(c.Latencies, 0.5)), ms(legacymodel.Percentile(c.Latencies, 0.99)),
			share(d), float64(flood.OK)/secs, float64(light.OK)/secs, ms(o.unloaded), o.effective, ms(o.idleP50)+" / "+ms(o.idleP99))
	}
	for _, o := range outcomes {
		if o.block == "" {
			continue
		}
		fmt.Fprintf(w, "\nThe limit (%s): %v to %v, median %v. Half the workers out: it fell to %v in %s. Back: it rose to %v in %s.\n",
			o.name, o.limitLo, o.limitHi, o.limitMedian, o.fallTo, took(o.fall), o.riseTo, took(o.rise))
	}
}

func ms(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }

func took(d time.Duration) string {
	if d < 0 {
		return "more than 5 s"
	}
	return d.Round(10 * time.Millisecond).String()
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func waitReady(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for ctx.Err() == nil {
		if res, err := http.Get(url); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("the gateway was not ready in time")
}

// scrape reads one sample of the Prometheus text at url; 0 when absent.
func scrape(url, series string) float64 {
	res, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
