package main

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP receiver of metrics: it decodes each
// export, protobuf, posted to /v1/metrics, and passes it on in exports.
type otlpReceiver struct {
	url     string
	exports chan *colmetricpb.ExportMetricsServiceRequest
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	rc := &otlpReceiver{exports: make(chan *colmetricpb.ExportMetricsServiceRequest, 1000)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/metrics" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("the receiver got %s %s, Content-Type %q", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.NotFound(w, r)
			return
		}
		body := r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		req := new(colmetricpb.ExportMetricsServiceRequest)
		if err == nil {
			err = proto.Unmarshal(b, req)
		}
		if err != nil {
			t.Errorf("the receiver could not read an export: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.exports <- req
		resp, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL
	return rc
}

// exported is what one export says: the service's name, the points of
// rate_limiting.requests by "policy/result", and every attribute value.
type exported struct {
	service  string
	requests map[string]int64
	values   []string
}

func read(req *colmetricpb.ExportMetricsServiceRequest) exported {
	got := exported{requests: map[string]int64{}}
	attrs := func(kvs []*commonpb.KeyValue) map[string]string {
		m := map[string]string{}
		for _, kv := range kvs {
			m[kv.GetKey()] = kv.GetValue().GetStringValue()
			got.values = append(got.values, kv.GetValue().String())
		}
		return m
	}
	for _, rm := range req.GetResourceMetrics() {
		got.service = attrs(rm.GetResource().GetAttributes())["service.name"]
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				for _, dp := range m.GetSum().GetDataPoints() {
					a := attrs(dp.GetAttributes())
					if m.GetName() == "rate_limiting.requests" {
						got.requests[a["rate_limiting.policy"]+"/"+a["rate_limiting.result"]] = dp.GetAsInt()
					}
				}
			}
		}
	}
	return got
}

// runServer runs the demo with args on a free port until stop, which
// returns its exit status once it has stopped.
func runServer(t *testing.T, args ...string) (base string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), io.Discard, stderr) }()
	stopped := false
	stop = func() int {
		stopped = true
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(10 * time.Second):
			t.Fatal("the server did not stop")
			return -1
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if _, rest, ok := strings.Cut(stderr.String(), "listening on "); ok {
			return strings.TrimSuffix(strings.Fields(rest)[0], `"`), stop
		}
	}
	t.Fatalf("the server did not start: %s", stderr.String())
	return "", nil
}

// TestOTLPExport: with -otlp, the demo pushes rate_limiting.requests to the
// receiver, counted as ratelimit_decisions_total counts, under its
// service's name, without the clients' keys: once at shutdown, and every
// -otlp-interval.
func TestOTLPExport(t *testing.T) {
	const key = "alice-0123456789"
	traffic := func(t *testing.T, base string) {
		t.Helper()
		var got []int
		for _, k := range []string{key, key, key, key, "bob", ""} {
			got = append(got, getStatus(t, base+"/geocode?q=paris", k))
		}
		require.Equal(t, []int{200, 200, 200, 429, 200, 401}, got)
		http.DefaultClient.CloseIdleConnections()
	}
	want := map[string]int64{"default/allowed": 4, "default/limited": 1, "default/invalid": 1}

	t.Run("at shutdown", func(t *testing.T) {
		rc := newOTLPReceiver(t)
		base, stop := runServer(t, "-rate", "0.01", "-burst", "3", "-otlp", rc.url, "-otlp-interval", "1h")
		traffic(t, base)
		assert.Equal(t, map[string]string{
			`ratelimit_decisions_total{outcome="allowed",policy="default"}`: "4",
			`ratelimit_decisions_total{outcome="invalid",policy="default"}`: "1",
			`ratelimit_decisions_total{outcome="limited",policy="default"}`: "1",
		}, scrape(t, base, "ratelimit_decisions_total{"), "the Prometheus counter, for comparison")
		require.Empty(t, rc.exports, "nothing before the first interval")
		require.Equal(t, 0, stop())
		require.Len(t, rc.exports, 1, "one export, at shutdown")
		got := read(<-rc.exports)
		assert.Equal(t, want, got.requests)
		assert.Equal(t, "geocoding", got.service)
		require.NotEmpty(t, got.values)
		for _, v := range got.values {
			assert.NotContains(t, v, "0123456789", "a client's key in an attribute")
		}
	})

	t.Run("every interval", func(t *testing.T) {
		t.Setenv("OTEL_SERVICE_NAME", "geocoding-eu")
		rc := newOTLPReceiver(t)
		base, stop := runServer(t, "-rate", "0.01", "-burst", "3", "-otlp", rc.url+"/", "-otlp-interval", "50ms")
		traffic(t, base)
		timeout := time.After(10 * time.Second)
		for got := (exported{}); fmt.Sprint(got.requests) != fmt.Sprint(want); {
			select {
			case req := <-rc.exports:
				got = read(req)
				assert.Equal(t, "geocoding-eu", got.service, "OTEL_SERVICE_NAME names the service")
			case <-timeout:
				t.Fatalf("no export with the counts within 10s; the last had %v", got.requests)
			}
		}
		require.Equal(t, 0, stop())
	})
}

// TestOTLPFlags: -otlp takes an http or https URL, -otlp-interval a
// positive duration; an error names the flag and the value.
func TestOTLPFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-otlp", "localhost:4318"}, "-otlp localhost:4318: want an http:// or https:// URL of an OTLP/HTTP receiver, such as http://localhost:4318"},
		{[]string{"-otlp", "grpc://collector:4317"}, "-otlp grpc://collector:4317: want an http:// or https:// URL of an OTLP/HTTP receiver, such as http://localhost:4318"},
		{[]string{"-otlp", "http://collector:4318?x=1"}, "-otlp http://collector:4318?x=1: want a URL without user, query or fragment: the metrics go to URL/v1/metrics"},
		{[]string{"-otlp", "http://localhost:4318", "-otlp-interval", "0s"}, "-otlp-interval 0s: want a positive duration, such as 10s"},
		{[]string{"-otlp-interval", "-1s"}, "-otlp-interval -1s: want a positive duration, such as 10s"},
	} {
		var cfg config
		fs := newFlagSet(&cfg)
		fs.SetOutput(io.Discard)
		require.NoError(t, fs.Parse(tc.args))
		assert.EqualError(t, cfg.check(), tc.want, "%q", tc.args)
	}
	var cfg config
	fs := newFlagSet(&cfg)
	require.NoError(t, fs.Parse([]string{"-otlp", "https://collector.example:4318/otlp"}))
	require.NoError(t, cfg.check())
	assert.Equal(t, 10*time.Second, cfg.otlpInterval, "the default")
	assert.Equal(t, "https://collector.example:4318/otlp/v1/metrics", otlpEndpoint(cfg.otlp))
}
