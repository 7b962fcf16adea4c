package otelx

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Env is what the standard OpenTelemetry environment variables say about
// tracing (the SDK's own names, so a deployment configured for other
// OpenTelemetry services configures differential too). A nil field: the
// environment does not say.
type Env struct {
	// Endpoint is OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (as given), else
	// OTEL_EXPORTER_OTLP_ENDPOINT (a base URL: a path gets /v1/traces
	// appended, as the OpenTelemetry SDKs do); "" when neither is set.
	Endpoint string
	// EndpointVar names the variable Endpoint came from.
	EndpointVar string
	// Disabled: OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
	Disabled bool
	// DisabledBy names the variable and value that disabled tracing.
	DisabledBy string
	// SampleRatio and ParentBased come from OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG.
	SampleRatio *float64
	ParentBased *bool
}

// ReadEnv reads the standard variables through lookup (os.LookupEnv). An
// empty variable counts as unset. It reports a value it cannot honour — a
// protocol other than http/protobuf, an exporter other than otlp or none,
// a sampler other than the SDK's built-in ones, a sampler argument that is
// not a ratio in [0, 1] — naming the variable and what to set instead.
// Endpoints are checked by Config.Validate. With an error, e still holds
// the endpoint and whether tracing is disabled.
func ReadEnv(lookup func(string) (string, bool)) (Env, error) {
	get := func(k string) string {
		if lookup == nil {
			return ""
		}
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var e Env
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := get(k); v != "" {
			e.Endpoint, e.EndpointVar = v, k
			// The signal-independent endpoint is a base URL: traces go to
			// its path + /v1/traces (a URL without a path gets /v1/traces
			// from Config in any case).
			if u, err := url.Parse(v); k == "OTEL_EXPORTER_OTLP_ENDPOINT" && err == nil && u.Host != "" && strings.Trim(u.Path, "/") != "" {
				e.Endpoint = u.JoinPath("v1/traces").String()
			}
			break
		}
	}
	if v := get("OTEL_SDK_DISABLED"); strings.EqualFold(v, "true") {
		e.Disabled, e.DisabledBy = true, "OTEL_SDK_DISABLED=true"
	}
	switch v := get("OTEL_TRACES_EXPORTER"); strings.ToLower(v) {
	case "", "otlp":
	case "none":
		if !e.Disabled {
			e.Disabled, e.DisabledBy = true, "OTEL_TRACES_EXPORTER=none"
		}
	default:
		return e, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: differential exports traces over OTLP only (set otlp, or none for no traces)", v)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := get(k); v != "" {
			if v != ProtocolHTTP {
				return e, fmt.Errorf("%s=%q: differential exports OTLP over HTTP only (set %s, and the endpoint to the collector's OTLP/HTTP port, usually 4318)", k, v, ProtocolHTTP)
			}
			break // the traces-specific one wins
		}
	}
	sampler := strings.ToLower(get("OTEL_TRACES_SAMPLER"))
	if sampler == "" {
		return e, nil
	}
	ratio := 1.0
	if arg := get("OTEL_TRACES_SAMPLER_ARG"); arg != "" && strings.HasSuffix(sampler, "traceidratio") {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || !(r >= 0 && r <= 1) {
			return e, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: the sample ratio of %s must be a number in [0, 1]", arg, sampler)
		}
		ratio = r
	}
	var pb bool
	switch sampler {
	case "always_on":
		ratio = 1
	case "always_off":
		ratio = 0
	case "traceidratio":
	case "parentbased_always_on":
		ratio, pb = 1, true
	case "parentbased_always_off":
		ratio, pb = 0, true
	case "parentbased_traceidratio":
		pb = true
	default:
		return e, fmt.Errorf("OTEL_TRACES_SAMPLER=%q is not supported: use always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio", sampler)
	}
	e.SampleRatio, e.ParentBased = &ratio, &pb
	return e, nil
}
