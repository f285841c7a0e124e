package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edgegate/gateway/config"
)

// Every gateway file the harness writes passes the gateway's own checks,
// as `gateway validate` at the start of a run would: main mode's long
// window with its billion requests stays within what a policy may count
// exactly, in both modes, for every gateway target, with and without a
// rotation of subjects and de-duplication.
func TestGatewayConfigsAreValid(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, pseudonymSecretFile), []byte(fakePseudonymSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"main", "flood"} {
		for _, name := range []string{"gateway-memory", "gateway-redis", "gateway-redis-inflight", "gateway-redis-lease"} {
			redisAddr := ""
			if name != "gateway-memory" {
				redisAddr = "127.0.0.1:6399"
			}
			for _, trustLoad := range []bool{false, true} {
				for _, dedup := range []bool{false, true} {
					src := gatewayConfig(mode, name, "127.0.0.1:18080", "127.0.0.1:18081", "127.0.0.1:18082", redisAddr, dedup, trustLoad)
					file := filepath.Join(dir, name+"-"+mode+".hcl")
					if _, diags := config.Parse(file, []byte(src), func(string) (string, bool) { return "", false }); diags.HasErrors() {
						t.Errorf("%s, %s mode (rotation %t, dedup %t): %s\n%s", name, mode, trustLoad, dedup, diags.Error(), src)
					}
				}
			}
		}
	}
}
