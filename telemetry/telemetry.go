// Package telemetry exports the gateway's traces: an OpenTelemetry tracer
// provider that sends spans in batches, over OTLP/HTTP, from a goroutine of
// its own. The request path only starts and ends spans (package proxy
// holds the tracer it is given); nothing here runs per request.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/edgegate/gateway/internal/option"
)

// Options are the telemetry block. A gateway without one exports nothing
// and starts no Tracing at all.
type Options struct {
	// Endpoint is the OTLP/HTTP receiver's base URL (http:// or https://,
	// such as http://127.0.0.1:4318); spans are posted to its path
	// followed by /v1/traces, as OTLP exporters do.
	Endpoint string
	// SampleRatio is the share of traces started here that are recorded,
	// 0 to 1; nil is DefaultSampleRatio. A request whose trusted caller
	// sent a trace context follows the caller's decision instead
	// (parent-based sampling).
	SampleRatio *float64
	// ServiceName is the service.name of every span; empty is
	// DefaultServiceName.
	ServiceName string
	// ServiceVersion is the service.version of every span; empty leaves
	// it out.
	ServiceVersion string
}

// Defaults of Options.
const (
	DefaultServiceName = "edge-gateway"
	DefaultSampleRatio = 1.0
	// exportTimeout bounds one post of a batch to the receiver; retries
	// of a failed post stop after exportRetries.
	exportTimeout = 10 * time.Second
	exportRetries = 30 * time.Second
	// queueSize spans wait for export at most; past it, spans are
	// dropped, never waited for: a receiver that is down or slow costs
	// the request path nothing.
	queueSize = 4096
)

// Validate reports every problem of o, each a *option.Error, joined.
func (o Options) Validate() error {
	var errs []error
	if u, err := url.Parse(o.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		errs = append(errs, &option.Error{Field: "otlp_endpoint", Summary: "Invalid OTLP endpoint", Detail: fmt.Sprintf("otlp_endpoint must be an http:// or https:// URL with a host and no credentials, query or fragment, not %q.", o.Endpoint)})
	}
	if r := o.SampleRatio; r != nil && !(*r >= 0 && *r <= 1) {
		errs = append(errs, &option.Error{Field: "sample_ratio", Summary: "Value out of range", Detail: fmt.Sprintf("sample_ratio must be from 0 to 1, not %g.", *r)})
	}
	return errors.Join(errs...)
}

// Tracing is a running tracer provider. Shutdown it once, at the end of
// the drain.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// New starts a tracer provider exporting to o.Endpoint. It does not
// connect: a receiver that is not there yet only loses the spans of its
// absence.
func New(o Options) (*Tracing, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if o.ServiceName == "" {
		o.ServiceName = DefaultServiceName
	}
	ratio := DefaultSampleRatio
	if o.SampleRatio != nil {
		ratio = *o.SampleRatio
	}
	// Every exporter setting is given here, so that none comes from the
	// OTEL_* environment, and the client uses no proxy from it either.
	exporter, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(strings.TrimSuffix(o.Endpoint, "/")+"/v1/traces"),
		otlptracehttp.WithTimeout(exportTimeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: time.Second, MaxInterval: 5 * time.Second, MaxElapsedTime: exportRetries}),
		otlptracehttp.WithHTTPClient(&http.Client{Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConnsPerHost: 2,
		}}),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(o.ServiceName)}
	if o.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(o.ServiceVersion))
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithBatcher(exporter,
			sdktrace.WithMaxQueueSize(queueSize),
			sdktrace.WithBatchTimeout(5*time.Second),
			sdktrace.WithExportTimeout(exportTimeout),
		),
	)
	return &Tracing{provider: provider}, nil
}

// Tracer is the tracer the request path starts its spans with.
func (t *Tracing) Tracer() trace.Tracer {
	return t.provider.Tracer("github.com/edgegate/gateway")
}

// Shutdown exports the spans still queued and stops, within ctx's
// deadline: past it, what is left is dropped.
func (t *Tracing) Shutdown(ctx context.Context) error {
	return t.provider.Shutdown(ctx)
}
