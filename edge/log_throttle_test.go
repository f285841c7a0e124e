package edge_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/edgegate/gateway/edge"
)

type throttleKey struct {
	route, outcome string
	client         netip.Prefix
}

func TestLogThrottleKeepsOneLineASecondAndCountsTheRest(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	d := edge.LogThrottle[throttleKey]{Now: func() time.Time { return at }}
	denied := throttleKey{route: "r", outcome: "denied"}
	if log, _ := d.Admit(denied); !log {
		t.Fatal("the first was not logged")
	}
	for i := range 9 {
		at = at.Add(100 * time.Millisecond)
		if log, _ := d.Admit(denied); log {
			t.Fatalf("number %d of the same second was logged", i+2)
		}
	}
	at = time.Unix(1_800_000_000, 0)
	for name, k := range map[string]throttleKey{
		"another route":   {route: "s", outcome: "denied"},
		"another outcome": {route: "r", outcome: "fallback_denied"},
		"a client":        {outcome: "no_route", client: netip.MustParsePrefix("192.0.2.1/32")},
		"another client":  {outcome: "no_route", client: netip.MustParsePrefix("192.0.2.2/32")},
	} {
		if log, _ := d.Admit(k); !log {
			t.Errorf("%s: the first line was not logged", name)
		}
	}
	at = at.Add(time.Second)
	log, skipped := d.Admit(denied)
	if !log || skipped != 9 {
		t.Fatalf("next second: logged %v, %d left out; want true, 9", log, skipped)
	}
}

func TestLogThrottleStaysBoundedWhenClientsRotate(t *testing.T) {
	d := edge.LogThrottle[throttleKey]{Max: 100}
	base := netip.MustParseAddr("2001:db8::").As16()
	for i := range 1000 {
		a := base
		a[6], a[7] = byte(i>>8), byte(i)
		d.Admit(throttleKey{outcome: "no_route", client: netip.PrefixFrom(netip.AddrFrom16(a), 64)})
		if n := d.Len(); n > 100 {
			t.Fatalf("after %d clients it holds %d keys, more than its 100", i+1, n)
		}
	}
}
