package limiter_test

import (
	"testing"
	"time"

	"github.com/edgegate/gateway/limiter"
)

// A policy built in code is held to what the headers can carry, as one
// from the file is.
func TestAQuotaTheHeadersCannotCarryIsRefused(t *testing.T) {
	p := &limiter.Policy{Name: "p", Algorithm: limiter.FixedWindow, Revision: 1, Limit: limiter.MaxHeaderInteger, Window: time.Hour, MaxCost: 1}
	if err := p.Validate(); err != nil {
		t.Fatalf("15 digits: %v", err)
	}
	p.Limit++
	if err := p.Validate(); err == nil {
		t.Fatal("a 16-digit quota was accepted")
	}
}
