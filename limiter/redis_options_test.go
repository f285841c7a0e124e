package limiter_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/edgegate/gateway/internal/option"
	"github.com/edgegate/gateway/limiter"
)

// The Redis options' rules are the limiter's: each problem names its
// field, and NewRedis refuses the options for the same reasons before it
// dials anything.
func TestRedisOptionsValidateNamesTheFieldOfEachProblem(t *testing.T) {
	o := limiter.RedisOptions{Addrs: []string{":6379", "redis-a", "redis-b:6380", "redis-c:port"}, TLSCAFile: "ca.pem"}
	var fields []string
	for _, e := range o.Validate().(interface{ Unwrap() []error }).Unwrap() {
		var fe *option.Error
		if !errors.As(e, &fe) {
			t.Fatalf("%v is no FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	if want := []string{"addrs[0]", "addrs[1]", "addrs[3]", "tls_ca_file"}; !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	var fe *option.Error
	if err := (limiter.RedisOptions{}).Validate(); !errors.As(err, &fe) || fe.Field != "addrs" {
		t.Errorf("no addresses: %v", err)
	}
	if _, err := limiter.NewRedis(context.Background(), o); !errors.As(err, &fe) {
		t.Errorf("NewRedis took options Validate refuses: %v", err)
	}
	for _, o := range []limiter.RedisOptions{
		{Addrs: []string{"10.0.0.1:26379"}, Mode: limiter.RedisSentinel},
		{Addrs: []string{"10.0.0.1:6379"}, MasterName: "mymaster"},
	} {
		if err := o.Validate(); !errors.As(err, &fe) || fe.Field != "master_name" {
			t.Errorf("mode %q, master_name %q: %v", o.Mode, o.MasterName, err)
		}
	}
	if err := (limiter.RedisOptions{Addrs: []string{"10.0.0.1:6379"}, KeyPrefix: "rl{}:"}).Validate(); !errors.As(err, &fe) || fe.Field != "key_prefix" {
		t.Errorf("a key prefix with braces: %v", err)
	}
	if err := (limiter.RedisOptions{Addrs: []string{"10.0.0.1:6379"}, DB: -1}).Validate(); !errors.As(err, &fe) || fe.Field != "db" {
		t.Errorf("db -1: %v", err)
	}
	if err := (limiter.RedisOptions{Addrs: []string{"10.0.0.1:26379"}, Mode: limiter.RedisSentinel, MasterName: "mymaster"}).Validate(); err != nil {
		t.Errorf("sentinel with a master: %v", err)
	}
	if err := (limiter.RedisOptions{Addrs: []string{"10.0.0.1:6379", "[::1]:6379"}, TLS: true, TLSCAFile: "ca.pem"}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// The memory backend's cap is the limiter's rule too: zero takes the
// default, anything else below one key a shard is refused, and Open
// refuses it for the same reason.
func TestMemoryOptionsValidateHoldsMaxEntriesToItsMinimum(t *testing.T) {
	var fe *option.Error
	for _, n := range []int{-1, 1, limiter.MinMemoryMaxEntries - 1} {
		if err := (limiter.MemoryOptions{MaxEntries: n}).Validate(); !errors.As(err, &fe) || fe.Field != "max_entries" {
			t.Errorf("max_entries %d: %v", n, err)
		}
	}
	for _, n := range []int{0, limiter.MinMemoryMaxEntries} {
		if err := (limiter.MemoryOptions{MaxEntries: n}).Validate(); err != nil {
			t.Errorf("max_entries %d: %v", n, err)
		}
	}
	if _, err := limiter.Open(context.Background(), limiter.Options{Kind: limiter.KindMemory, Memory: limiter.MemoryOptions{MaxEntries: 10}}); !errors.As(err, &fe) {
		t.Errorf("Open took max_entries 10: %v", err)
	}
}

// The breaker's and the fallback's minimums are the limiter's: zero takes
// the default (no fallback), anything else below the minimum is refused,
// by NewRedis and Open too, before anything is dialled.
func TestBreakerAndFallbackOptionsHoldTheirMinimums(t *testing.T) {
	var fe *option.Error
	b := limiter.BreakerOptions{Failures: -1, Cooldown: limiter.MinBreakerCooldown / 2}
	var fields []string
	for _, e := range b.Validate().(interface{ Unwrap() []error }).Unwrap() {
		if errors.As(e, &fe) {
			fields = append(fields, fe.Field)
		}
	}
	if want := []string{"failures", "cooldown"}; !slices.Equal(fields, want) {
		t.Errorf("breaker fields %q, want %q", fields, want)
	}
	if err := (limiter.BreakerOptions{Failures: 1, Cooldown: limiter.MinBreakerCooldown}).Validate(); err != nil {
		t.Errorf("the breaker's minimums: %v", err)
	}
	if err := (limiter.FallbackOptions{Instances: -1}).Validate(); !errors.As(err, &fe) || fe.Field != "instances" {
		t.Errorf("instances -1: %v", err)
	}
	if err := (limiter.FallbackOptions{}).Validate(); err != nil {
		t.Errorf("no fallback: %v", err)
	}
	redis := limiter.RedisOptions{Addrs: []string{"127.0.0.1:1"}, Breaker: b}
	if _, err := limiter.NewRedis(context.Background(), redis); !errors.As(err, &fe) {
		t.Errorf("NewRedis took a breaker Validate refuses: %v", err)
	}
	redis.Breaker = limiter.BreakerOptions{}
	if _, err := limiter.Open(context.Background(), limiter.Options{Kind: limiter.KindRedis, Redis: redis, Fallback: limiter.FallbackOptions{Instances: -1}}); !errors.As(err, &fe) {
		t.Errorf("Open took a fallback Validate refuses: %v", err)
	}
}
