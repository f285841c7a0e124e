package config

import (
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
	var absent []string // the decoder said so already
	if !has(b.Body, "otlp_endpoint") {
		absent = append(absent, "otlp_endpoint")
	}
	c.fields(o.Validate(), "Invalid telemetry block", b.DefRange, finderOf(map[string]hcl.Body{"": b.Body}, nil, nil), absent...)
	return o
}
