package config

import (
	"errors"

	"github.com/hashicorp/hcl/v2"

	"github.com/edgegate/gateway/telemetry"
)

// telemetry reads the telemetry block; telemetry.Options.Validate checks
// it, and each problem points at the attribute it names. nil: no block,
// no traces.
func (c *checker) telemetry(b *telemetryBlock) *telemetry.Options {
	if b == nil {
		return nil
	}
	o := &telemetry.Options{Endpoint: b.OTLPEndpoint, SampleRatio: b.SampleRatio, ServiceName: or(b.ServiceName, "")}
	at := map[string]hcl.Range{
		"otlp_endpoint": b.OTLPEndpointRange,
		"sample_ratio":  b.SampleRatioRange,
		"service_name":  b.ServiceNameRange,
	}
	err := o.Validate()
	problems := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		problems = joined.Unwrap()
	}
	for _, p := range problems {
		var fe *telemetry.FieldError
		if errors.As(p, &fe) {
			rng, ok := at[fe.Field]
			switch {
			case !ok:
				rng = b.DefRange
			case rng == hcl.Range{}:
				// Absent or not decoded: decoding said so already.
				continue
			}
			c.errorf(rng, fe.Summary, "%s", fe.Detail)
		}
	}
	return o
}
