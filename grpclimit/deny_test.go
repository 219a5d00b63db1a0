package grpclimit_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	geocode       = "/geocoding.v1.Geocoder/Geocode"
	geocodeStream = "/geocoding.v1.Geocoder/GeocodeStream"
	// denyWait is what a key waits after its one token of a policy of 3
	// requests per 10 s is spent, on a clock that stands still
	// (3.333333333 s), rounded up to the millisecond.
	denyWait = 3334 * time.Millisecond
)

// denyPolicy is the limit of the tests: a burst of one, then wait.
var denyPolicy = ratelimit.Policy{Name: "per-key", Limit: ratelimit.Per(3, 10*time.Second).WithBurst(1)}

// geocoder returns the Geocoder's unary and bidirectional methods, built
// without generated code, behind a Middleware of the given policy, keyed by
// X-API-Key, answering through OnDeny and OnError.
func geocoder(t *testing.T, store ratelimit.Store, p ratelimit.Policy) http.Handler {
	t.Helper()
	l, err := ratelimit.New(store, p)
	require.NoError(t, err)
	mw, err := ratelimit.NewMiddleware(l, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{
		OnDeny: grpclimit.OnDeny, OnError: grpclimit.OnError, Clock: stillClock, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	answer := func(name string) *structpb.Struct {
		s, _ := structpb.NewStruct(map[string]any{"name": name, "lat": 48.8566, "lon": 2.3522})
		return s
	}
	mux := http.NewServeMux()
	mux.Handle(geocode, connect.NewUnaryHandler(geocode,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[structpb.Struct], error) {
			return connect.NewResponse(answer(req.Msg.GetValue())), nil
		}, connect.WithIdempotency(connect.IdempotencyNoSideEffects)))
	mux.Handle(geocodeStream, connect.NewBidiStreamHandler(geocodeStream,
		func(_ context.Context, s *connect.BidiStream[wrapperspb.StringValue, structpb.Struct]) error {
			for {
				req, err := s.Receive()
				if errors.Is(err, io.EOF) {
					return nil
				} else if err != nil {
					return err
				}
				if err := s.Send(answer(req.GetValue())); err != nil {
					return err
				}
			}
		}))
	return nethttp.Wrap(mw)(mux)
}

// stillEpoch is the time of stillClock.
var stillEpoch = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

// stillClock is a clock that never moves, so that every wait is exact.
func stillClock() time.Time { return stillEpoch }

// stillStore returns an in-process store on stillClock.
func stillStore(t *testing.T) ratelimit.Store {
	t.Helper()
	s, err := memorystore.New(&memorystore.Options{Clock: stillClock})
	require.NoError(t, err)
	return s
}

// httpServer is a started httptest server and the client of its protocol.
type httpServer struct {
	name   string
	start  func(h http.Handler) *httptest.Server
	client func(s *httptest.Server) *http.Client
	http2  bool
}

var httpServers = []httpServer{
	{name: "HTTP/1.1", start: httptest.NewServer, client: (*httptest.Server).Client},
	{name: "HTTP/2", start: func(h http.Handler) *httptest.Server {
		s := httptest.NewUnstartedServer(h)
		s.EnableHTTP2 = true
		s.StartTLS()
		return s
	}, client: (*httptest.Server).Client, http2: true},
	{name: "h2c", start: func(h http.Handler) *httptest.Server {
		s := httptest.NewUnstartedServer(h)
		s.Config.Protocols = new(http.Protocols)
		s.Config.Protocols.SetHTTP1(true)
		s.Config.Protocols.SetUnencryptedHTTP2(true)
		s.Start()
		return s
	}, client: func(*httptest.Server) *http.Client {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		return &http.Client{Transport: &http.Transport{Protocols: p}}
	}, http2: true},
}

// startServer starts s in front of h, and stops it, and its client's idle
// connections, when the test ends.
func startServer(t *testing.T, s httpServer, h http.Handler) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := s.start(h)
	c := s.client(srv)
	t.Cleanup(func() {
		c.CloseIdleConnections()
		srv.Close()
	})
	return srv, c
}

var rpcProtocols = []struct {
	name string
	opts []connect.ClientOption
	grpc bool
}{
	{name: "Connect"},
	{name: "gRPC", opts: []connect.ClientOption{connect.WithGRPC()}, grpc: true},
	{name: "gRPC-Web", opts: []connect.ClientOption{connect.WithGRPCWeb()}, grpc: true},
	{name: "Connect GET", opts: []connect.ClientOption{connect.WithHTTPGet(), connect.WithIdempotency(connect.IdempotencyNoSideEffects)}},
}

// geocodeRequest returns a request for name under the API key key.
func geocodeRequest(name, key string) *connect.Request[wrapperspb.StringValue] {
	req := connect.NewRequest(wrapperspb.String(name))
	if key != "" {
		req.Header().Set("X-API-Key", key)
	}
	return req
}

func TestOnDenyConnectClients(t *testing.T) {
	for _, s := range httpServers {
		for _, p := range rpcProtocols {
			t.Run(s.name+"/"+p.name, func(t *testing.T) {
				srv, hc := startServer(t, s, geocoder(t, stillStore(t), denyPolicy))
				client := connect.NewClient[wrapperspb.StringValue, structpb.Struct](hc, srv.URL+geocode, p.opts...)

				res, err := client.CallUnary(t.Context(), geocodeRequest("Paris", "alice"))
				require.NoError(t, err, "the first call")
				assert.Equal(t, "Paris", res.Msg.GetFields()["name"].GetStringValue())

				_, err = client.CallUnary(t.Context(), geocodeRequest("Paris", "alice"))
				require.Error(t, err, "the second call")
				assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
				var ce *connect.Error
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, "rate limited by policy per-key", ce.Message())
				assertConnectDetails(t, ce, denyWait)

				meta := ce.Meta()
				assert.Equal(t, "4", meta.Get("Retry-After"))
				assert.Equal(t, `"per-key";r=0;t=4`, meta.Get("RateLimit"))
				assert.Equal(t, `"per-key";q=1;w=4`, meta.Get("RateLimit-Policy"))
				if p.grpc {
					assert.Equal(t, "3334", meta.Get("Grpc-Retry-Pushback-Ms"))
				} else {
					assert.Empty(t, meta.Get("Grpc-Retry-Pushback-Ms"))
				}
			})
		}
	}
}

// assertConnectDetails asserts that ce holds a RetryInfo of delay and a
// QuotaFailure naming the policy per-key.
func assertConnectDetails(t *testing.T, ce *connect.Error, delay time.Duration) {
	t.Helper()
	var retry *errdetails.RetryInfo
	var quota *errdetails.QuotaFailure
	for _, d := range ce.Details() {
		v, err := d.Value()
		require.NoError(t, err, "detail %s", d.Type())
		switch v := v.(type) {
		case *errdetails.RetryInfo:
			retry = v
		case *errdetails.QuotaFailure:
			quota = v
		}
	}
	if assert.NotNil(t, retry, "RetryInfo in %v", ce.Details()) {
		assert.Equal(t, delay, retry.GetRetryDelay().AsDuration())
	}
	if assert.NotNil(t, quota, "QuotaFailure in %v", ce.Details()) && assert.Len(t, quota.GetViolations(), 1) {
		assert.Equal(t, "per-key", quota.GetViolations()[0].GetSubject())
	}
}

// A bidirectional stream refused when it opens: Connect's end-of-stream
// message, or gRPC's trailers-only answer.
func TestOnDenyConnectStreams(t *testing.T) {
	for _, s := range httpServers {
		if !s.http2 {
			continue // connect-go refuses bidirectional streams over HTTP/1.1
		}
		for _, p := range rpcProtocols[:3] { // Connect GET is for unary calls
			t.Run(s.name+"/"+p.name, func(t *testing.T) {
				srv, hc := startServer(t, s, geocoder(t, stillStore(t), denyPolicy))
				unary := connect.NewClient[wrapperspb.StringValue, structpb.Struct](hc, srv.URL+geocode, p.opts...)
				_, err := unary.CallUnary(t.Context(), geocodeRequest("Paris", "alice"))
				require.NoError(t, err, "the call that spends the token")

				bidi := connect.NewClient[wrapperspb.StringValue, structpb.Struct](hc, srv.URL+geocodeStream, p.opts...)
				stream := bidi.CallBidiStream(t.Context())
				stream.RequestHeader().Set("X-API-Key", "alice")
				_ = stream.Send(wrapperspb.String("Paris")) // may fail once refused; Receive tells why
				_, err = stream.Receive()
				require.Error(t, err)
				assert.Equal(t, connect.CodeResourceExhausted, connect.CodeOf(err), "%v", err)
				var ce *connect.Error
				require.ErrorAs(t, err, &ce)
				assertConnectDetails(t, ce, denyWait)
				assert.NoError(t, stream.CloseRequest())
				assert.NoError(t, stream.CloseResponse())
			})
		}
	}
}

// grpcConn returns a grpc-go client of srv: TLS with httptest's
// certificate, or h2c.
func grpcConn(t *testing.T, srv *httptest.Server, tls bool, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if tls {
		pool := x509.NewCertPool()
		pool.AddCert(srv.Certificate())
		creds = credentials.NewClientTLSFromCert(pool, "")
	}
	conn, err := grpc.NewClient(srv.Listener.Addr().String(), append(opts, grpc.WithTransportCredentials(creds))...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestOnDenyGRPCGoClient(t *testing.T) {
	for _, s := range httpServers {
		if !s.http2 {
			continue // grpc-go speaks HTTP/2 only
		}
		t.Run(s.name, func(t *testing.T) {
			srv, _ := startServer(t, s, geocoder(t, stillStore(t), denyPolicy))
			conn := grpcConn(t, srv, s.name == "HTTP/2")
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "alice")

			out := new(structpb.Struct)
			require.NoError(t, conn.Invoke(ctx, geocode, wrapperspb.String("Paris"), out), "the first call")
			assert.Equal(t, "Paris", out.GetFields()["name"].GetStringValue())

			var header, trailer metadata.MD
			err := conn.Invoke(ctx, geocode, wrapperspb.String("Paris"), out, grpc.Header(&header), grpc.Trailer(&trailer))
			st, ok := status.FromError(err)
			require.True(t, ok, "%v", err)
			assert.Equal(t, codes.ResourceExhausted, st.Code(), "%v", err)
			assert.Equal(t, "rate limited by policy per-key", st.Message())
			var retry *errdetails.RetryInfo
			var quota *errdetails.QuotaFailure
			for _, d := range st.Details() {
				switch d := d.(type) {
				case *errdetails.RetryInfo:
					retry = d
				case *errdetails.QuotaFailure:
					quota = d
				}
			}
			if assert.NotNil(t, retry, "RetryInfo in %v", st.Details()) {
				assert.Equal(t, denyWait, retry.GetRetryDelay().AsDuration())
			}
			if assert.NotNil(t, quota, "QuotaFailure in %v", st.Details()) {
				assert.Equal(t, "per-key", quota.GetViolations()[0].GetSubject())
			}
			assert.Empty(t, header, "trailers-only: no header metadata")
			assert.Equal(t, []string{"3334"}, trailer.Get("grpc-retry-pushback-ms"))
			assert.Equal(t, []string{`"per-key";r=0;t=4`}, trailer.Get("ratelimit"))
			assert.NotEmpty(t, trailer.Get("ratelimit-policy"))
		})
	}
}

// A grpc-go client whose service config retries RESOURCE_EXHAUSTED waits
// the pushback and tries again, and makes one attempt on a spent calendar
// quota (pushback -1).
func TestOnDenyGRPCGoRetryPolicy(t *testing.T) {
	const serviceConfig = `{"methodConfig": [{"name": [{"service": "geocoding.v1.Geocoder"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "30s", "maxBackoff": "30s",
		"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	for _, tc := range []struct {
		name     string
		policy   ratelimit.Policy
		attempts int64
		pushback string
	}{
		{"wait", ratelimit.Policy{Name: "fast", Limit: ratelimit.Per(1000, time.Second).WithBurst(1)}, 3, "1"},
		{"calendar", ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(1, time.UTC)}, 1, "-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var attempts atomic.Int64
			h := geocoder(t, stillStore(t), tc.policy)
			srv, _ := startServer(t, httpServers[2], http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				attempts.Add(1)
				h.ServeHTTP(w, r)
			}))
			conn := grpcConn(t, srv, false, grpc.WithDefaultServiceConfig(serviceConfig))
			ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "alice")
			require.NoError(t, conn.Invoke(ctx, geocode, wrapperspb.String("Paris"), new(structpb.Struct)))
			attempts.Store(0)

			var trailer metadata.MD
			err := conn.Invoke(ctx, geocode, wrapperspb.String("Paris"), new(structpb.Struct), grpc.Trailer(&trailer))
			if code := status.Code(err); code != codes.ResourceExhausted {
				// grpc-go's race (grpc/grpc-go#7230): when the answer, sent
				// before the request's message is read, arrives before the
				// last attempt has written that message, that attempt's
				// error is SendMsg's io.EOF, not the status it received.
				assert.ErrorIs(t, err, io.EOF, "code %v", code)
			}
			assert.Equal(t, tc.attempts, attempts.Load(), "attempts")
			assert.Equal(t, []string{tc.pushback}, trailer.Get("grpc-retry-pushback-ms"))
		})
	}
}

// The refusal goes out while the request's body is still open: the
// Middleware and OnDeny never read it, nor wait for it.
func TestOnDenyBeforeBody(t *testing.T) {
	for _, tc := range []struct {
		server      httpServer
		contentType string
		status      int
	}{
		{httpServers[0], "application/proto", http.StatusTooManyRequests},
		{httpServers[0], "application/grpc", http.StatusOK},
		{httpServers[1], "application/grpc", http.StatusOK},
		{httpServers[1], "application/proto", http.StatusTooManyRequests},
		{httpServers[2], "application/grpc-web+proto", http.StatusOK},
	} {
		t.Run(tc.server.name+"/"+tc.contentType, func(t *testing.T) {
			srv, hc := startServer(t, tc.server, geocoder(t, stillStore(t), denyPolicy))
			client := connect.NewClient[wrapperspb.StringValue, structpb.Struct](hc, srv.URL+geocode)
			_, err := client.CallUnary(t.Context(), geocodeRequest("Paris", "alice"))
			require.NoError(t, err, "the call that spends the token")

			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			body, open := io.Pipe()
			// The body ends only when the time to answer is up: net/http's
			// client waits for its body's end before it gives up.
			context.AfterFunc(ctx, func() { open.Close() })
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+geocode, body)
			require.NoError(t, err)
			req.Header.Set("Content-Type", tc.contentType)
			req.Header.Set("Connect-Protocol-Version", "1")
			req.Header.Set("X-API-Key", "alice")
			res, err := hc.Do(req)
			require.NoError(t, err, "the answer, while the body is open")
			require.NoError(t, ctx.Err(), "the answer, while the body is open")
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			require.NoError(t, err)

			assert.Equal(t, tc.status, res.StatusCode)
			assert.Equal(t, "4", res.Header.Get("Retry-After"))
			if tc.status == http.StatusOK {
				assert.Equal(t, "8", res.Header.Get("Grpc-Status"))
				assert.Equal(t, "3334", res.Header.Get("Grpc-Retry-Pushback-Ms"))
				assert.Empty(t, b, "trailers-only")
			} else {
				var e struct{ Code string }
				require.NoError(t, json.Unmarshal(b, &e), "%s", b)
				assert.Equal(t, "resource_exhausted", e.Code)
			}
			if !tc.server.http2 {
				assert.True(t, res.Close, "HTTP/1.1: the connection closes, the body unread")
			}
		})
	}
}

// Over HTTP/2 the gRPC refusal is one HEADERS frame that ends the stream
// (trailers-only), sent while the client's half of the stream is open.
func TestOnDenyTrailersOnlyFrame(t *testing.T) {
	srv, hc := startServer(t, httpServers[2], geocoder(t, stillStore(t), denyPolicy))
	client := connect.NewClient[wrapperspb.StringValue, structpb.Struct](hc, srv.URL+geocode, connect.WithGRPC())
	_, err := client.CallUnary(t.Context(), geocodeRequest("Paris", "alice"))
	require.NoError(t, err, "the call that spends the token")

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(5*time.Second)))
	_, err = io.WriteString(conn, http2.ClientPreface)
	require.NoError(t, err)
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	require.NoError(t, fr.WriteSettings())
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", srv.Listener.Addr().String()}, {":path", geocode},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"x-api-key", "alice"},
	} {
		require.NoError(t, enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}))
	}
	require.NoError(t, fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}))

	for {
		f, err := fr.ReadFrame()
		require.NoError(t, err, "a frame before the answer")
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				require.NoError(t, fr.WriteSettingsAck())
			}
		case *http2.DataFrame:
			require.NotEqual(t, uint32(1), f.StreamID, "a DATA frame before the status")
		case *http2.MetaHeadersFrame:
			require.Equal(t, uint32(1), f.StreamID)
			assert.True(t, f.StreamEnded(), "END_STREAM on the answer's HEADERS")
			assert.Equal(t, "200", f.PseudoValue("status"))
			fields := map[string]string{}
			for _, hf := range f.RegularFields() {
				fields[hf.Name] = hf.Value
			}
			assert.Equal(t, "application/grpc", fields["content-type"])
			assert.Equal(t, "8", fields["grpc-status"])
			assert.Equal(t, "rate limited by policy per-key", fields["grpc-message"])
			assert.Equal(t, "3334", fields["grpc-retry-pushback-ms"])
			assert.Equal(t, `"per-key";r=0;t=4`, fields["ratelimit"])
			bin, err := connect.DecodeBinaryHeader(fields["grpc-status-details-bin"])
			require.NoError(t, err)
			assert.False(t, strings.HasSuffix(fields["grpc-status-details-bin"], "="), "unpadded base64")
			st := new(statuspb.Status)
			require.NoError(t, proto.Unmarshal(bin, st))
			assert.Equal(t, int32(codes.ResourceExhausted), st.GetCode())
			assert.Len(t, st.GetDetails(), 2)
			return
		}
	}
}

// failingStore is a store that cannot decide.
type failingStore struct{}

func (failingStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("dial tcp 10.0.0.7:6379: connection refused")
}

func TestOnError(t *testing.T) {
	for _, s := range httpServers {
		for _, p := range rpcProtocols {
			t.Run(s.name+"/"+p.name, func(t *testing.T) {
				srv, hc := startServer(t, s, geocoder(t, failingStore{}, denyPolicy))
				client := connect.NewClient[wrapperspb.StringValue, structpb.Struct](hc, srv.URL+geocode, p.opts...)

				_, err := client.CallUnary(t.Context(), geocodeRequest("Paris", "alice"))
				assert.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "a failing store: %v", err)
				var ce *connect.Error
				require.ErrorAs(t, err, &ce)
				assert.NotContains(t, ce.Message(), "10.0.0.7", "the error's text")
				var retry *errdetails.RetryInfo
				for _, d := range ce.Details() {
					if v, err := d.Value(); err == nil {
						retry, _ = v.(*errdetails.RetryInfo)
					}
				}
				if assert.NotNil(t, retry, "RetryInfo in %v", ce.Details()) {
					assert.Equal(t, time.Second, retry.GetRetryDelay().AsDuration())
				}
				assert.Equal(t, "1", ce.Meta().Get("Retry-After"))

				_, err = client.CallUnary(t.Context(), geocodeRequest("Paris", ""))
				assert.Equal(t, connect.CodeUnauthenticated, connect.CodeOf(err), "no API key: %v", err)
			})
		}
	}
}
