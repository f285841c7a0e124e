package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter/redistest"
)

// TestAGatewayKilledHoldingLeasesFreesThemWithinLeaseTTL runs two real
// gateway processes on one Redis with a concurrency limit of 2 and a
// lease TTL of 3s. The first admits two requests that the upstream holds,
// and is killed with SIGKILL: it never releases them. The second refuses
// the subject until the leases run out, and admits it again within the
// lease TTL and a second of the kill.
func TestAGatewayKilledHoldingLeasesFreesThemWithinLeaseTTL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the gateway binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool to build the gateway with")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "gateway")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := redistest.Start(t)
	var held atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reports/hold" {
			held.Add(1)
			<-r.Context().Done()
			return
		}
		io.WriteString(w, "report")
	}))
	t.Cleanup(up.Close)
	const leaseTTL = 3 * time.Second
	startGateway := func(name string) (*exec.Cmd, string) {
		port, admin := redistest.FreePort(t), redistest.FreePort(t)
		path := writeGateway(t, pseudonymFromFile+fmt.Sprintf(`
listen {
  http  = "127.0.0.1:%d"
  admin = "127.0.0.1:%d"
}
limiter {
  backend = "redis"
  redis { addrs = [%q] }
}
policy "reports" {
  algorithm = "concurrency"
  limit     = 2
  lease_ttl = %q
}
route "reports" {
  path     = "/reports"
  upstream = %q
  policy   = "reports"
  subject  = ["client_ip"]
}
`, port, admin, s.Addr, leaseTTL.String(), up.URL))
		cmd := exec.Command(bin, "run", "-config", path)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		base := "http://127.0.0.1:" + strconv.Itoa(port)
		readyz := "http://127.0.0.1:" + strconv.Itoa(admin) + "/readyz"
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if res, err := http.Get(readyz); err == nil {
				res.Body.Close()
				if res.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("gateway %s did not become ready", name)
			}
		}
		return cmd, base
	}
	status := func(url string) int {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}

	a, aURL := startGateway("a")
	_, bURL := startGateway("b")
	for range 2 {
		go http.Get(aURL + "/reports/hold") // answered only by the kill
	}
	for deadline := time.Now().Add(10 * time.Second); held.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the upstream never held the two requests")
		}
	}
	if err := a.Process.Kill(); err != nil { // SIGKILL: no release, no renewal
		t.Fatal(err)
	}
	killed := time.Now()
	a.Wait()
	if code := status(bURL + "/reports/quick"); code != http.StatusTooManyRequests {
		t.Fatalf("right after the kill the other gateway answered %d, want 429: the dead gateway's leases are held until they expire", code)
	}
	for {
		code := status(bURL + "/reports/quick")
		if code == 200 {
			break
		}
		if code != http.StatusTooManyRequests {
			t.Fatalf("status %d, want 429 until the leases expire", code)
		}
		if time.Since(killed) > leaseTTL+time.Second {
			t.Fatalf("the killed gateway's slots were still taken %v after the kill, want free within lease_ttl (%v) + 1s", time.Since(killed), leaseTTL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("slots free %v after the kill", time.Since(killed).Round(time.Millisecond))
}
