package limiter_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/edgegate/gateway/limiter"
)

// The Redis options' rules are the limiter's: each problem names its
// field, and NewRedis refuses the options for the same reasons before it
// dials anything.
func TestRedisOptionsValidateNamesTheFieldOfEachProblem(t *testing.T) {
	o := limiter.RedisOptions{Addrs: []string{":6379", "redis-a", "redis-b:6380", "redis-c:port"}, TLSCAFile: "ca.pem"}
	var fields []string
	for _, e := range o.Validate().(interface{ Unwrap() []error }).Unwrap() {
		var fe *limiter.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is no FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	if want := []string{"addrs[0]", "addrs[1]", "addrs[3]", "tls_ca_file"}; !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
	var fe *limiter.FieldError
	if err := (limiter.RedisOptions{}).Validate(); !errors.As(err, &fe) || fe.Field != "addrs" {
		t.Errorf("no addresses: %v", err)
	}
	if _, err := limiter.NewRedis(context.Background(), o); !errors.As(err, &fe) {
		t.Errorf("NewRedis took options Validate refuses: %v", err)
	}
	if err := (limiter.RedisOptions{Addrs: []string{"10.0.0.1:6379", "[::1]:6379"}, TLS: true, TLSCAFile: "ca.pem"}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}
