package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// rpcProtocols are the protocols of the RPC route on the HTTP port, each
// over HTTP/1.1 or HTTP/2 without TLS (h2c), as connect-go's clients speak
// them.
var rpcProtocols = []struct {
	name string
	opts []connect.ClientOption
	h2c  bool
}{
	{"connect", nil, false},
	{"connect-h2c", nil, true},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}, true},
	{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}, false},
	{"grpc-web-h2c", []connect.ClientOption{connect.WithGRPCWeb()}, true},
}

// geocodeClient is a connect-go client of Geocode on an HTTP port.
type geocodeClient struct {
	*connect.Client[wrapperspb.StringValue, structpb.Struct]
}

// newGeocodeClient returns a client of Geocode at base, over h2c or
// HTTP/1.1, with opts (the protocol).
func newGeocodeClient(t *testing.T, base string, h2c bool, opts ...connect.ClientOption) geocodeClient {
	t.Helper()
	transport := &http.Transport{}
	if h2c {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		transport.Protocols = &p
	}
	t.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport, Timeout: 5 * time.Second}
	return geocodeClient{connect.NewClient[wrapperspb.StringValue, structpb.Struct](hc, base+geocodeProcedure, opts...)}
}

// geocode calls Geocode with name, and key as X-API-Key unless it is "".
func (c geocodeClient) geocode(t *testing.T, key, name string) (*connect.Response[structpb.Struct], error) {
	t.Helper()
	req := connect.NewRequest(wrapperspb.String(name))
	if key != "" {
		req.Header().Set(apiKeyHeader, key)
	}
	return c.CallUnary(t.Context(), req)
}

// codes returns the codes of n calls of Geocode with key; 0 (OK) for an
// answer.
func (c geocodeClient) codes(t *testing.T, key string, n int) []connect.Code {
	t.Helper()
	got := make([]connect.Code, n)
	for i := range got {
		if _, err := c.geocode(t, key, "paris"); err != nil {
			got[i] = connect.CodeOf(err)
		}
	}
	return got
}

// connectRefusal returns what a refused Connect, gRPC or gRPC-Web call
// says, as refusalOf does for grpc-go: it requires
// CodeResourceExhausted with a RetryInfo and a QuotaFailure.
func connectRefusal(t *testing.T, err error) refusal {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "not a Connect error: %v", err)
	require.Equal(t, connect.CodeResourceExhausted, ce.Code(), "error %v", ce)
	var r refusal
	var retry, quota bool
	for _, d := range ce.Details() {
		v, err := d.Value()
		require.NoError(t, err, "detail %s", d.Type())
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			retry, r.retryDelay = true, v.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			quota = true
			for _, violation := range v.GetViolations() {
				r.subjects = append(r.subjects, violation.GetSubject())
			}
		}
	}
	require.True(t, retry, "no RetryInfo in %v", ce.Details())
	require.True(t, quota, "no QuotaFailure in %v", ce.Details())
	r.pushback = ce.Meta().Get("Grpc-Retry-Pushback-Ms")
	return r
}

// TestConnectGeocode: the RPC route answers Geocode in every protocol, as
// the gRPC server does, with the rate-limit header fields.
func TestConnectGeocode(t *testing.T) {
	s := startRPC(t)
	for _, p := range rpcProtocols {
		t.Run(p.name, func(t *testing.T) {
			c := newGeocodeClient(t, s.base, p.h2c, p.opts...)
			resp, err := c.geocode(t, "key-"+p.name, " new  YORK")
			require.NoError(t, err)
			assert.Equal(t, map[string]any{"name": "New York", "lat": 40.7128, "lon": -74.0060}, resp.Msg.AsMap())
			assert.Equal(t, `"default";q=10;w=2`, resp.Header().Get("RateLimit-Policy"))
			assert.Equal(t, `"default";r=9;t=1`, resp.Header().Get("RateLimit"))

			for _, tc := range []struct {
				key, name string
				want      connect.Code
			}{
				{"key-" + p.name, "atlantis", connect.CodeNotFound},
				{"key-" + p.name, "", connect.CodeInvalidArgument},
				{"", "paris", connect.CodeUnauthenticated},
			} {
				_, err := c.geocode(t, tc.key, tc.name)
				assert.Equal(t, tc.want, connect.CodeOf(err), "key %q, name %q: %v", tc.key, tc.name, err)
			}
		})
	}
}

// TestConnectRefusal: a call over the limit is CodeResourceExhausted in
// every protocol, never CodeUnavailable, with the wait in RetryInfo (and,
// for gRPC and gRPC-Web, in the pushback) and the refusing policy in
// QuotaFailure.
func TestConnectRefusal(t *testing.T) {
	s := startRPC(t, "-rate", "4", "-burst", "2")
	for _, p := range rpcProtocols {
		t.Run(p.name, func(t *testing.T) {
			c := newGeocodeClient(t, s.base, p.h2c, p.opts...)
			key := "key-" + p.name
			require.Equal(t, []connect.Code{0, 0}, c.codes(t, key, 2))
			_, err := c.geocode(t, key, "paris")
			want := refusal{retryDelay: 250 * time.Millisecond, subjects: []string{"default"}}
			if strings.HasPrefix(p.name, "grpc") {
				want.pushback = "250"
			}
			assert.Equal(t, want, connectRefusal(t, err))
		})
	}
}

// TestConnectRefusalOnTheWire: a Connect refusal is HTTP 429 with
// Retry-After, the rate-limit fields and a Connect error body; /geocode
// keeps its problem body.
func TestConnectRefusalOnTheWire(t *testing.T) {
	s := startRPC(t, "-rate", "1", "-burst", "1")
	post := func() (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.base+geocodeProcedure, strings.NewReader(`"paris"`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(apiKeyHeader, "alice")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	defer http.DefaultClient.CloseIdleConnections()
	resp, body := post()
	require.Equal(t, http.StatusOK, resp.StatusCode, "body %s", body)
	var place map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &place))
	assert.Equal(t, map[string]any{"name": "Paris", "lat": 48.8566, "lon": 2.3522}, place)

	resp, body = post()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Equal(t, `"default";q=1;w=1`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var e struct {
		Code    string
		Message string
		Details []struct{ Type, Value string }
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), "body %s", body)
	assert.Equal(t, "resource_exhausted", e.Code)
	var types []string
	for _, d := range e.Details {
		types = append(types, d.Type)
	}
	assert.ElementsMatch(t, []string{"google.rpc.RetryInfo", "google.rpc.QuotaFailure"}, types)

	w := serve(s.http, request{target: "/geocode?q=paris", apiKey: "alice"})
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "one quota")
	assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
}

// TestConnectSharedQuota: a key has one quota over GET /geocode, the RPC
// route in every protocol and the gRPC port.
func TestConnectSharedQuota(t *testing.T) {
	s := startRPC(t, "-burst", "3")
	require.Equal(t, repeat(200, 3), statuses(s.http, request{target: "/geocode?q=paris", apiKey: "alice"}, 3))
	for _, p := range rpcProtocols {
		c := newGeocodeClient(t, s.base, p.h2c, p.opts...)
		_, err := c.geocode(t, "alice", "paris")
		assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%s, spent over HTTP: %v", p.name, err)
	}

	c := newGeocodeClient(t, s.base, false)
	require.Equal(t, []connect.Code{0, 0, 0}, c.codes(t, "bob", 3))
	assert.Equal(t, []codes.Code{codes.ResourceExhausted}, s.codes(t, "bob", 1), "spent over Connect, refused on the gRPC port")
	assert.Equal(t, http.StatusTooManyRequests, serve(s.http, request{target: "/geocode?q=paris", apiKey: "bob"}).Code)

	require.Equal(t, repeatCode(codes.OK, 3), s.codes(t, "carol", 3))
	assert.Equal(t, []connect.Code{connect.CodeResourceExhausted}, c.codes(t, "carol", 1), "spent on the gRPC port")
}

// TestConnectFrameworks: Gin and Echo serve the RPC route as net/http
// does, with refusals in the caller's protocol.
func TestConnectFrameworks(t *testing.T) {
	for _, fw := range frameworks {
		t.Run(fw, func(t *testing.T) {
			s := startRPC(t, "-framework", fw, "-rate", "4", "-burst", "2")
			for _, p := range rpcProtocols {
				c := newGeocodeClient(t, s.base, p.h2c, p.opts...)
				key := "key-" + p.name
				resp, err := c.geocode(t, key, "tokyo")
				require.NoError(t, err, p.name)
				assert.Equal(t, "Tokyo", resp.Msg.AsMap()["name"], p.name)
				assert.Equal(t, `"default";q=2;w=1`, resp.Header().Get("RateLimit-Policy"), p.name)
				_, err = c.geocode(t, key, "atlantis")
				assert.Equal(t, connect.CodeNotFound, connect.CodeOf(err), p.name)
				_, err = c.geocode(t, key, "paris")
				assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%s: %v", p.name, err)
				if err != nil {
					assert.Equal(t, 250*time.Millisecond, connectRefusal(t, err).retryDelay, p.name)
				}
			}
			w := serve(s.http, request{target: "/geocode?q=paris", apiKey: "key-connect"})
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), "/geocode keeps its problem body")
			assert.Equal(t, http.StatusOK, serve(s.http, request{target: "/healthz"}).Code)
		})
	}
}

// TestConnectStoreClosed: with -on-store-error closed and Redis down, the
// RPC route answers CodeUnavailable with a RetryInfo, in every protocol.
func TestConnectStoreClosed(t *testing.T) {
	redis := redistest.Start(t)
	s := startRPC(t, "-store", "redis", "-redis-url", "redis://"+redis.Addr+"/0", "-on-store-error", "closed")
	redis.Kill()
	for _, p := range rpcProtocols {
		c := newGeocodeClient(t, s.base, p.h2c, p.opts...)
		_, err := c.geocode(t, "alice", "paris")
		var ce *connect.Error
		require.True(t, errors.As(err, &ce), "%s: %v", p.name, err)
		assert.Equal(t, connect.CodeUnavailable, ce.Code(), p.name)
		require.Len(t, ce.Details(), 1, p.name)
		v, err := ce.Details()[0].Value()
		require.NoError(t, err)
		retry, ok := v.(*errdetails.RetryInfo)
		require.True(t, ok, "%s: detail %T", p.name, v)
		assert.Equal(t, time.Second, retry.GetRetryDelay().AsDuration(), p.name)
	}
}

// TestConnectOnlyPOST: the RPC route is limited whatever the method, and
// answers only POST, as Connect does.
func TestConnectOnlyPOST(t *testing.T) {
	h, _ := newTestHandler(t, "-burst", "1")
	w := serve(h, request{target: geocodeProcedure, apiKey: "alice"})
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
	assert.Equal(t, `"default";r=0;t=1`, field(w.Header(), "RateLimit"), "limited")
	w = serve(h, request{target: geocodeProcedure, apiKey: "alice"})
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
}

// TestHTTPServesH2C: the HTTP port speaks HTTP/2 without TLS to a client
// that knows it does (as gRPC clients do), and HTTP/1.1 to the others.
func TestHTTPServesH2C(t *testing.T) {
	s := startRPC(t)
	for _, h2c := range []bool{false, true} {
		transport := &http.Transport{}
		if h2c {
			var p http.Protocols
			p.SetUnencryptedHTTP2(true)
			transport.Protocols = &p
		}
		resp, err := (&http.Client{Transport: transport}).Get(s.base + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		transport.CloseIdleConnections()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, map[bool]int{false: 1, true: 2}[h2c], resp.ProtoMajor, "h2c %v", h2c)
	}
}
