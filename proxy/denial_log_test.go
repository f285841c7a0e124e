package proxy

import (
	"testing"
	"time"
)

func TestDenialLogKeepsOneLineASecondAndCountsTheRest(t *testing.T) {
	var d denialLog
	at := time.Unix(1_800_000_000, 0)
	if log, _ := d.admit("r", "v1:a", at); !log {
		t.Fatal("the first denial was not logged")
	}
	for i := range 9 {
		if log, _ := d.admit("r", "v1:a", at.Add(time.Duration(i)*100*time.Millisecond)); log {
			t.Fatalf("denial %d of the same second was logged", i+2)
		}
	}
	if log, _ := d.admit("r", "v1:b", at); !log {
		t.Fatal("another subject's first denial was not logged")
	}
	if log, _ := d.admit("s", "v1:a", at); !log {
		t.Fatal("the same subject on another route was not logged")
	}
	log, skipped := d.admit("r", "v1:a", at.Add(time.Second))
	if !log || skipped != 9 {
		t.Fatalf("next second: logged %v, %d left out; want true, 9", log, skipped)
	}
}
