package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/otellimit"
)

// otlpExport is what -otlp asks for: the library's OpenTelemetry metrics
// (otellimit), fed by the same hooks as the Prometheus metrics and pushed
// over OTLP/HTTP, in protobuf, to URL/v1/metrics every -otlp-interval and
// once more when the server stops. Its resource is service.name
// "geocoding", unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES)
// names another. A nil *otlpExport, without -otlp, exports nothing: its
// hooks are the Prometheus ones alone.
type otlpExport struct {
	metrics  *otellimit.Metrics
	provider *sdkmetric.MeterProvider
	logger   *slog.Logger
}

// otlpShutdownTimeout bounds the last export, at shutdown.
const otlpShutdownTimeout = 5 * time.Second

// newOTLP returns the export of cfg's -otlp, or nil without it. cfg must
// have passed check; newOTLP reports an OTEL_RESOURCE_ATTRIBUTES it cannot
// read.
func newOTLP(cfg config) (*otlpExport, error) {
	if cfg.otlp == "" {
		return nil, nil
	}
	ctx := context.Background()
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "geocoding")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: they win
	)
	if err != nil {
		return nil, fmt.Errorf("-otlp: the resource from OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME: %w", err)
	}
	exporter, err := otlpmetrichttp.New(ctx, otlpmetrichttp.WithEndpointURL(otlpEndpoint(cfg.otlp)))
	if err != nil {
		return nil, fmt.Errorf("-otlp %s: %w", cfg.otlp, err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res),
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithInterval(cfg.otlpInterval))))
	m, err := otellimit.New(provider)
	if err != nil {
		_ = provider.Shutdown(ctx)
		return nil, err
	}
	logger := slog.Default()
	if cfg.logHandler != nil {
		logger = slog.New(cfg.logHandler)
	}
	return &otlpExport{metrics: m, provider: provider, logger: logger}, nil
}

// otlpEndpoint returns where the metrics of -otlp URL go: URL/v1/metrics,
// the path that OTLP/HTTP receivers serve, as the contract says.
func otlpEndpoint(u string) string { return strings.TrimSuffix(u, "/") + "/v1/metrics" }

// checkOTLP reports why u is not a URL for -otlp: an http or https URL
// with a host, and neither query nor fragment.
func checkOTLP(u string) error {
	p, err := url.Parse(u)
	switch {
	case err != nil || p.Scheme != "http" && p.Scheme != "https" || p.Host == "" || p.Opaque != "":
		return fmt.Errorf("want an http:// or https:// URL of an OTLP/HTTP receiver, such as http://localhost:4318")
	case p.RawQuery != "" || p.Fragment != "" || p.User != nil:
		return fmt.Errorf("want a URL without user, query or fragment: the metrics go to URL/v1/metrics")
	}
	return nil
}

// observe returns prom, a MiddlewareOptions.Observe function, followed by
// the OpenTelemetry metrics' Observe.
func (o *otlpExport) observe(prom func(*http.Request, ratelimit.Event)) func(*http.Request, ratelimit.Event) {
	if o == nil {
		return prom
	}
	return func(r *http.Request, ev ratelimit.Event) {
		prom(r, ev)
		o.metrics.Observe(r, ev)
	}
}

// onError returns prom, a failover.Options.OnError function, followed by
// the OpenTelemetry metrics' OnError.
func (o *otlpExport) onError(prom func(error)) func(error) {
	if o == nil {
		return prom
	}
	return func(err error) {
		prom(err)
		o.metrics.OnError(err)
	}
}

// onHealthChange returns prom, a failover.Options.OnHealthChange function,
// followed by the OpenTelemetry metrics' OnHealthChange.
func (o *otlpExport) onHealthChange(prom func(bool, error)) func(bool, error) {
	if o == nil {
		return prom
	}
	return func(healthy bool, err error) {
		prom(healthy, err)
		o.metrics.OnHealthChange(healthy, err)
	}
}

// close exports the metrics once more, within otlpShutdownTimeout, and
// stops the export, logging why the last export failed, if it did.
func (o *otlpExport) close() {
	if o == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), otlpShutdownTimeout)
	defer cancel()
	if err := o.provider.Shutdown(ctx); err != nil {
		o.logger.Error("geocoding: the last OTLP export failed", "err", err)
	}
}
