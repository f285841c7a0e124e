package proxy

import (
	"net/netip"
	"testing"
	"time"
)

func TestRefusalLogKeepsOneLineASecondAndCountsTheRest(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	d := refusalLog{now: func() time.Time { return at }}
	denied := refusalLogKey{route: "r", outcome: "denied", pseudonym: "v1:a"}
	if log, _ := d.admit(denied); !log {
		t.Fatal("the first denial was not logged")
	}
	for i := range 9 {
		at = at.Add(100 * time.Millisecond)
		if log, _ := d.admit(denied); log {
			t.Fatalf("denial %d of the same second was logged", i+2)
		}
	}
	at = time.Unix(1_800_000_000, 0)
	for name, k := range map[string]refusalLogKey{
		"another subject":            {route: "r", outcome: "denied", pseudonym: "v1:b"},
		"the same subject elsewhere": {route: "s", outcome: "denied", pseudonym: "v1:a"},
		"another outcome":            {route: "r", outcome: "fallback_denied", pseudonym: "v1:a"},
		"a client without subject":   {outcome: "no_route", client: netip.MustParsePrefix("192.0.2.1/32")},
		"another such client":        {outcome: "no_route", client: netip.MustParsePrefix("192.0.2.2/32")},
	} {
		if log, _ := d.admit(k); !log {
			t.Errorf("%s: the first line was not logged", name)
		}
	}
	at = at.Add(time.Second)
	log, skipped := d.admit(denied)
	if !log || skipped != 9 {
		t.Fatalf("next second: logged %v, %d left out; want true, 9", log, skipped)
	}
}

func TestRefusalLogStaysBoundedWhenClientsRotate(t *testing.T) {
	d := refusalLog{max: 100}
	base := netip.MustParseAddr("2001:db8::").As16()
	for i := range 1000 {
		a := base
		a[6], a[7] = byte(i>>8), byte(i)
		d.admit(refusalLogKey{outcome: "no_route", client: netip.PrefixFrom(netip.AddrFrom16(a), 64)})
		if n := d.size(); n > 100 {
			t.Fatalf("after %d clients the log holds %d keys, more than its 100", i+1, n)
		}
	}
}
