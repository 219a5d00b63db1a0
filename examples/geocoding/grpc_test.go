package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

// rpcServer is the demo built from flags with a fake clock, serving HTTP
// and gRPC on loopback ports as run serves them.
type rpcServer struct {
	base  string           // of the HTTP port: http://127.0.0.1:PORT
	http  http.Handler     // the HTTP handler, for in-process requests
	conn  *grpc.ClientConn // a grpc-go client of the gRPC port
	clock *storetest.Clock
}

// startRPC starts the demo with args and -grpc-addr until the test ends.
func startRPC(t *testing.T, args ...string) *rpcServer {
	t.Helper()
	return startRPCWith(t, nil, args...)
}

// startRPCWith is startRPC, with set changing the parsed configuration
// (if not nil) before the servers are built.
func startRPCWith(t *testing.T, set func(*config), args ...string) *rpcServer {
	t.Helper()
	var cfg config
	fs := newFlagSet(&cfg)
	fs.SetOutput(io.Discard)
	require.NoError(t, fs.Parse(append([]string{"-grpc-addr", "127.0.0.1:0"}, args...)))
	require.NoError(t, cfg.check())
	clock := new(storetest.Clock)
	cfg.clock = clock.Now
	if set != nil {
		set(&cfg)
	}
	s, err := newServers(cfg)
	require.NoError(t, err)
	t.Cleanup(s.close)
	require.NotNil(t, s.grpc)

	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := newHTTPServer(s.http, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(httpLn) })
	wg.Go(func() { s.grpc.Serve(grpcLn) })
	conn, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		conn.Close()
		srv.Close()
		s.grpc.Stop()
		wg.Wait()
	})
	return &rpcServer{base: "http://" + httpLn.Addr().String(), http: s.http, conn: conn, clock: clock}
}

// withKey returns ctx with the metadata x-api-key: key, unless key is "".
func withKey(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
}

// rpcAnswer is what a gRPC client gets of a unary call.
type rpcAnswer struct {
	out             *structpb.Struct
	err             error
	header, trailer metadata.MD
}

// code returns the answer's status code.
func (a rpcAnswer) code() codes.Code { return status.Code(a.err) }

// geocodeCall calls Geocode on conn with name, in ctx.
func geocodeCall(ctx context.Context, conn *grpc.ClientConn, name string) rpcAnswer {
	var a rpcAnswer
	out := new(structpb.Struct)
	a.err = conn.Invoke(ctx, geocodeProcedure, wrapperspb.String(name), out, grpc.Header(&a.header), grpc.Trailer(&a.trailer))
	if a.err == nil {
		a.out = out
	}
	return a
}

// geocode calls Geocode on s's gRPC port with name, key as x-api-key.
func (s *rpcServer) geocode(t *testing.T, key, name string) rpcAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(withKey(t.Context(), key), 5*time.Second)
	defer cancel()
	return geocodeCall(ctx, s.conn, name)
}

// codes returns the status codes of n calls of Geocode with key.
func (s *rpcServer) codes(t *testing.T, key string, n int) []codes.Code {
	t.Helper()
	got := make([]codes.Code, n)
	for i := range got {
		got[i] = s.geocode(t, key, "paris").code()
	}
	return got
}

func repeatCode(c codes.Code, n int) []codes.Code {
	s := make([]codes.Code, n)
	for i := range s {
		s[i] = c
	}
	return s
}

// refusal is what a refused call says: its RetryInfo's delay, the subjects
// of its QuotaFailure and its pushback trailer.
type refusal struct {
	retryDelay time.Duration
	subjects   []string
	pushback   string
}

// refusalOf returns the details of a refused call: it requires
// RESOURCE_EXHAUSTED with a RetryInfo and a QuotaFailure.
func refusalOf(t *testing.T, err error, trailer metadata.MD) refusal {
	t.Helper()
	st := status.Convert(err)
	require.Equal(t, codes.ResourceExhausted, st.Code(), "status %v", st)
	var r refusal
	var retry, quota bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry, r.retryDelay = true, d.GetRetryDelay().AsDuration()
		case *errdetails.QuotaFailure:
			quota = true
			for _, v := range d.GetViolations() {
				r.subjects = append(r.subjects, v.GetSubject())
			}
		}
	}
	require.True(t, retry, "no RetryInfo in %v", st.Details())
	require.True(t, quota, "no QuotaFailure in %v", st.Details())
	if p := trailer.Get("grpc-retry-pushback-ms"); len(p) == 1 {
		r.pushback = p[0]
	}
	return r
}

func TestGRPCGeocode(t *testing.T) {
	s := startRPC(t)
	for _, tc := range []struct {
		name     string
		query    string
		want     codes.Code
		wantName string
		lat, lon float64
	}{
		{"known place", "Paris", codes.OK, "Paris", 48.8566, 2.3522},
		{"case and spaces ignored", " NEW  york", codes.OK, "New York", 40.7128, -74.0060},
		{"unknown place", "atlantis", codes.NotFound, "", 0, 0},
		{"empty name", "", codes.InvalidArgument, "", 0, 0},
		{"blank name", "  ", codes.InvalidArgument, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := s.geocode(t, "key-"+tc.name, tc.query)
			require.Equal(t, tc.want, a.code(), "Geocode(%q): %v", tc.query, a.err)
			assert.Equal(t, []string{`"default";q=10;w=2`}, a.header.Get("ratelimit-policy"), "every answer carries the policy")
			assert.Equal(t, []string{`"default";r=9;t=1`}, a.header.Get("ratelimit"))
			if tc.want != codes.OK {
				return
			}
			assert.Equal(t, map[string]any{"name": tc.wantName, "lat": tc.lat, "lon": tc.lon}, a.out.AsMap())
		})
	}
}

func TestGRPCMissingAPIKey(t *testing.T) {
	s := startRPC(t)
	a := s.geocode(t, "", "paris")
	assert.Equal(t, codes.Unauthenticated, a.code(), "Geocode without x-api-key: %v", a.err)
}

// TestGRPCRefusal: past the burst, a call is RESOURCE_EXHAUSTED, with the
// time until it would pass in RetryInfo and the pushback trailer, the
// refusing policy in QuotaFailure, and the rate-limit metadata in the
// trailers; that time later it passes.
func TestGRPCRefusal(t *testing.T) {
	s := startRPC(t, "-rate", "4", "-burst", "2")
	require.Equal(t, repeatCode(codes.OK, 2), s.codes(t, "alice", 2))

	a := s.geocode(t, "alice", "paris")
	assert.Equal(t, refusal{retryDelay: 250 * time.Millisecond, subjects: []string{"default"}, pushback: "250"}, refusalOf(t, a.err, a.trailer))
	assert.Equal(t, []string{`"default";q=2;w=1`}, a.trailer.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"default";r=0;t=1`}, a.trailer.Get("ratelimit"))

	s.clock.Advance(249 * time.Millisecond)
	assert.Equal(t, codes.ResourceExhausted, s.geocode(t, "alice", "paris").code(), "1 ms early")
	s.clock.Advance(time.Millisecond)
	assert.Equal(t, codes.OK, s.geocode(t, "alice", "paris").code(), "on time")
	assert.Equal(t, repeatCode(codes.OK, 2), s.codes(t, "bob", 2), "another key has a bucket of its own")
}

// TestGRPCDailyPushback: a call refused by a spent -daily quota says when
// the day ends in RetryInfo, but its pushback is -1: no automatic retry.
func TestGRPCDailyPushback(t *testing.T) {
	s := startRPC(t, "-daily", "2")
	setClock(s.clock, time.Date(2026, 1, 10, 20, 30, 0, 0, time.UTC))
	require.Equal(t, repeatCode(codes.OK, 2), s.codes(t, "alice", 2))
	a := s.geocode(t, "alice", "paris")
	assert.Equal(t, refusal{retryDelay: 3*time.Hour + 30*time.Minute, subjects: []string{"daily"}, pushback: "-1"}, refusalOf(t, a.err, a.trailer))
	assert.Equal(t, []string{`"daily";r=0;t=12600`}, a.trailer.Get("ratelimit"))
}

// geocodeStream is a client's GeocodeStream.
type geocodeStream struct{ grpc.ClientStream }

// openStream opens GeocodeStream on s's gRPC port with key as x-api-key.
func (s *rpcServer) openStream(t *testing.T, key string) *geocodeStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(withKey(t.Context(), key), 5*time.Second)
	t.Cleanup(cancel)
	cs, err := s.conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "GeocodeStream", ClientStreams: true, ServerStreams: true}, geocodeStreamProcedure)
	require.NoError(t, err)
	return &geocodeStream{cs}
}

// ask sends name and returns the answer, or the error that ended the
// stream.
func (g *geocodeStream) ask(t *testing.T, name string) (*structpb.Struct, error) {
	t.Helper()
	if err := g.SendMsg(wrapperspb.String(name)); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	} // on io.EOF, RecvMsg tells why the stream ended
	out := new(structpb.Struct)
	if err := g.RecvMsg(out); err != nil {
		return nil, err
	}
	return out, nil
}

// TestGRPCStream: each message of GeocodeStream is answered by one, in
// order, and costs one token; the message over the limit ends the stream
// with RESOURCE_EXHAUSTED and its details.
func TestGRPCStream(t *testing.T) {
	s := startRPC(t, "-rate", "1", "-burst", "3")
	g := s.openStream(t, "alice")
	for _, name := range []string{"paris", "Tokyo", "new york"} {
		out, err := g.ask(t, name)
		require.NoError(t, err, "ask(%q)", name)
		p, _ := lookup(name)
		assert.Equal(t, p.Name, out.AsMap()["name"], "ask(%q)", name)
	}
	header, err := g.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=3;w=3`}, header.Get("ratelimit-policy"), "the first message's")
	assert.Equal(t, []string{`"default";r=2;t=1`}, header.Get("ratelimit"))

	_, err = g.ask(t, "rome")
	assert.Equal(t, refusal{retryDelay: time.Second, subjects: []string{"default"}, pushback: "1000"}, refusalOf(t, err, g.Trailer()))
	assert.Equal(t, []string{`"default";r=0;t=1`}, g.Trailer().Get("ratelimit"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(g.RecvMsg(new(structpb.Struct))), "the stream has ended")

	s.clock.Advance(time.Second)
	assert.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted}, s.codes(t, "alice", 2), "the stream spent the key's tokens")
}

// TestGRPCStreamOpeningIsFree: a stream that sends nothing costs nothing.
func TestGRPCStreamOpeningIsFree(t *testing.T) {
	s := startRPC(t, "-rate", "1", "-burst", "2")
	for range 5 {
		g := s.openStream(t, "alice")
		require.NoError(t, g.CloseSend())
		assert.ErrorIs(t, g.RecvMsg(new(structpb.Struct)), io.EOF)
	}
	assert.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted}, s.codes(t, "alice", 3))
}

// TestGRPCStreamErrors: an unknown or empty name, or a missing API key,
// ends the stream with its status; the answers before it stand.
func TestGRPCStreamErrors(t *testing.T) {
	s := startRPC(t)
	for _, tc := range []struct {
		key, name string
		want      codes.Code
	}{
		{"alice", "atlantis", codes.NotFound},
		{"alice", "", codes.InvalidArgument},
		{"", "paris", codes.Unauthenticated},
	} {
		g := s.openStream(t, tc.key)
		if tc.key != "" {
			_, err := g.ask(t, "paris")
			require.NoError(t, err)
		}
		_, err := g.ask(t, tc.name)
		assert.Equal(t, tc.want, status.Code(err), "key %q, name %q: %v", tc.key, tc.name, err)
	}
}

// TestGRPCSharedQuota: a key has one quota over HTTP and gRPC, unary and
// streaming: what one spends, the others lack.
func TestGRPCSharedQuota(t *testing.T) {
	s := startRPC(t, "-burst", "3")
	get := request{target: "/geocode?q=paris", apiKey: "alice"}
	require.Equal(t, repeat(200, 3), statuses(s.http, get, 3))
	a := s.geocode(t, "alice", "paris")
	assert.Equal(t, refusal{retryDelay: 200 * time.Millisecond, subjects: []string{"default"}, pushback: "200"}, refusalOf(t, a.err, a.trailer), "spent over HTTP")

	require.Equal(t, repeatCode(codes.OK, 3), s.codes(t, "bob", 3))
	w := serve(s.http, request{target: "/geocode?q=paris", apiKey: "bob"})
	assert.Equal(t, http.StatusTooManyRequests, w.Code, "spent over gRPC")
	assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"), "/geocode keeps its problem body")

	g := s.openStream(t, "carol")
	for range 2 {
		_, err := g.ask(t, "paris")
		require.NoError(t, err)
	}
	require.NoError(t, g.CloseSend())
	assert.Equal(t, []int{200, 429}, statuses(s.http, request{target: "/geocode?q=paris", apiKey: "carol"}, 2), "spent by a stream")
}

// TestGRPCPlans: with -plans, a key's calls follow its plan, as its HTTP
// requests do (MiddlewareOptions.LimiterFor on the request made of the
// call).
func TestGRPCPlans(t *testing.T) {
	s := startRPC(t, "-plans", plansFile(t, `{"gold": {"burst": 4, "daily": 5}}`))
	setClock(s.clock, time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC))
	a := s.geocode(t, "gold", "paris")
	require.NoError(t, a.err)
	assert.Equal(t, []string{`"default";q=4;w=1,"daily";q=5;w=86400`}, a.header.Get("ratelimit-policy"))
	assert.Equal(t, append(repeatCode(codes.OK, 3), codes.ResourceExhausted), s.codes(t, "gold", 4))
	s.clock.Advance(time.Second)
	assert.Equal(t, []int{200, 429}, statuses(s.http, request{target: "/geocode?q=paris", apiKey: "gold"}, 2), "the fifth of the day over HTTP, then none")
	a = s.geocode(t, "gold", "paris")
	assert.Equal(t, refusal{retryDelay: 24*time.Hour - time.Second, subjects: []string{"daily"}, pushback: "-1"}, refusalOf(t, a.err, a.trailer))
}

// TestGRPCKeyByIP: with -key ip, a call's client is its peer, or the
// x-forwarded-for metadata when the peer is a trusted proxy, with the
// same key as over HTTP.
func TestGRPCKeyByIP(t *testing.T) {
	call := func(t *testing.T, s *rpcServer, forwardedFor string) codes.Code {
		t.Helper()
		ctx := t.Context()
		if forwardedFor != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", forwardedFor)
		}
		return geocodeCall(ctx, s.conn, "paris").code()
	}
	t.Run("trusted", func(t *testing.T) {
		s := startRPC(t, "-key", "ip", "-trusted-proxies", "127.0.0.1/32", "-burst", "2")
		assert.Equal(t, codes.OK, call(t, s, "203.0.113.1"))
		assert.Equal(t, codes.OK, call(t, s, "198.51.100.9, 203.0.113.1"), "the rightmost untrusted entry")
		assert.Equal(t, codes.ResourceExhausted, call(t, s, "203.0.113.1"))
		assert.Equal(t, codes.OK, call(t, s, "203.0.113.2"), "another client")
		w := serve(s.http, request{target: "/geocode?q=paris", remoteAddr: "127.0.0.1:5000", forwardedFor: "203.0.113.2"})
		assert.Equal(t, http.StatusOK, w.Code)
		w = serve(s.http, request{target: "/geocode?q=paris", remoteAddr: "127.0.0.1:5000", forwardedFor: "203.0.113.2"})
		assert.Equal(t, http.StatusTooManyRequests, w.Code, "one quota over gRPC and HTTP")
	})
	t.Run("untrusted", func(t *testing.T) {
		s := startRPC(t, "-key", "ip", "-burst", "2")
		assert.Equal(t, codes.OK, call(t, s, "203.0.113.1"))
		assert.Equal(t, codes.OK, call(t, s, "203.0.113.2"))
		assert.Equal(t, codes.ResourceExhausted, call(t, s, "203.0.113.3"), "x-forwarded-for from an untrusted peer is ignored: all are 127.0.0.1")
		assert.Equal(t, http.StatusTooManyRequests, serve(s.http, request{target: "/geocode?q=paris", remoteAddr: "127.0.0.1:5000"}).Code)
	})
}

// TestGRPCReflection: reflection lists the service and describes it, with
// no API key and whatever the limits.
func TestGRPCReflection(t *testing.T) {
	s := startRPC(t, "-burst", "1")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	rs, err := v1reflectiongrpc.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	ask := func(req *v1reflectiongrpc.ServerReflectionRequest) *v1reflectiongrpc.ServerReflectionResponse {
		t.Helper()
		require.NoError(t, rs.Send(req))
		resp, err := rs.Recv()
		require.NoError(t, err)
		return resp
	}

	for range 3 { // more than -burst, without a key
		resp := ask(&v1reflectiongrpc.ServerReflectionRequest{MessageRequest: &v1reflectiongrpc.ServerReflectionRequest_ListServices{}})
		var names []string
		for _, svc := range resp.GetListServicesResponse().GetService() {
			names = append(names, svc.GetName())
		}
		assert.ElementsMatch(t, []string{"geocoding.v1.Geocoder", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"}, names)
	}

	resp := ask(&v1reflectiongrpc.ServerReflectionRequest{MessageRequest: &v1reflectiongrpc.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "geocoding.v1.Geocoder"}})
	files := map[string]*descriptorpb.FileDescriptorProto{}
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := new(descriptorpb.FileDescriptorProto)
		require.NoError(t, proto.Unmarshal(b, fd))
		files[fd.GetName()] = fd
	}
	require.Contains(t, files, "geocoding/v1/geocoder.proto")
	assert.Contains(t, files, "google/protobuf/wrappers.proto", "with its imports")
	assert.Contains(t, files, "google/protobuf/struct.proto")
	fd := files["geocoding/v1/geocoder.proto"]
	assert.Equal(t, "geocoding.v1", fd.GetPackage())
	require.Len(t, fd.GetService(), 1)
	var methods []string
	for _, m := range fd.GetService()[0].GetMethod() {
		methods = append(methods, strings.Join([]string{m.GetName(), m.GetInputType(), m.GetOutputType()}, " "))
		assert.Equal(t, m.GetName() == "GeocodeStream", m.GetClientStreaming() && m.GetServerStreaming(), "%s streams", m.GetName())
	}
	assert.Equal(t, []string{
		"Geocode .google.protobuf.StringValue .google.protobuf.Struct",
		"GeocodeStream .google.protobuf.StringValue .google.protobuf.Struct",
	}, methods)

	// The older v1alpha, which some clients still ask first.
	old, err := v1alphareflectiongrpc.NewServerReflectionClient(s.conn).ServerReflectionInfo(ctx)
	require.NoError(t, err)
	require.NoError(t, old.Send(&v1alphareflectiongrpc.ServerReflectionRequest{MessageRequest: &v1alphareflectiongrpc.ServerReflectionRequest_ListServices{}}))
	oldResp, err := old.Recv()
	require.NoError(t, err)
	assert.Len(t, oldResp.GetListServicesResponse().GetService(), 3)

	assert.Equal(t, []codes.Code{codes.OK, codes.ResourceExhausted}, s.codes(t, "alice", 2), "the calls are limited")
}

// TestGRPCStoreClosed: with -on-store-error closed and Redis down, a call
// is UNAVAILABLE with a RetryInfo, never refused as over the limit.
func TestGRPCStoreClosed(t *testing.T) {
	redis := redistest.Start(t)
	s := startRPC(t, "-store", "redis", "-redis-url", "redis://"+redis.Addr+"/0", "-on-store-error", "closed")
	require.Equal(t, codes.OK, s.geocode(t, "alice", "paris").code())
	redis.Kill()

	a := s.geocode(t, "alice", "paris")
	st := status.Convert(a.err)
	require.Equal(t, codes.Unavailable, st.Code(), "status %v", st)
	require.Len(t, st.Details(), 1)
	retry, ok := st.Details()[0].(*errdetails.RetryInfo)
	require.True(t, ok, "details %v", st.Details())
	assert.Equal(t, time.Second, retry.GetRetryDelay().AsDuration())

	g := s.openStream(t, "alice")
	_, err := g.ask(t, "paris")
	assert.Equal(t, codes.Unavailable, status.Code(err), "a stream message: %v", err)
}

// TestGRPCRunEndToEnd runs the real server with -grpc-addr on free
// loopback ports, calls it, and stops it as SIGINT would, with a stream
// still open: the graceful stop waits for it, then cuts it off.
func TestGRPCRunEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-grpc-addr", "127.0.0.1:0", "-rate", "0.01", "-burst", "2"}, io.Discard, stderr)
	}()
	var addr string
	require.Eventually(t, func() bool {
		_, rest, ok := strings.Cut(stderr.String(), " grpc=")
		if ok {
			addr = strings.Fields(rest)[0]
		}
		return ok
	}, 5*time.Second, 10*time.Millisecond, "no gRPC address on the listening line; stderr:\n%s", stderr)
	assert.Contains(t, listeningLine(t, stderr.String()), " grpc=127.0.0.1:")

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	callCtx, callCancel := context.WithTimeout(withKey(ctx, "e2e"), 5*time.Second)
	defer callCancel()
	a := geocodeCall(callCtx, conn, "Tokyo")
	require.NoError(t, a.err)
	assert.Equal(t, "Tokyo", a.out.AsMap()["name"])
	assert.Equal(t, []string{`"default";q=2;w=200`}, a.header.Get("ratelimit-policy"))

	s := &rpcServer{conn: conn}
	g := s.openStream(t, "e2e")
	_, err = g.ask(t, "paris")
	require.NoError(t, err)
	_, err = g.ask(t, "paris")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	// A stream still open when the server stops, for longer than the
	// graceful stop's time.
	streamCtx, streamCancel := context.WithTimeout(withKey(context.Background(), "other"), 4*shutdownTimeout)
	defer streamCancel()
	cs, err := conn.NewStream(streamCtx, &grpc.StreamDesc{StreamName: "GeocodeStream", ClientStreams: true, ServerStreams: true}, geocodeStreamProcedure)
	require.NoError(t, err)
	open := &geocodeStream{cs}
	_, err = open.ask(t, "paris")
	require.NoError(t, err)

	start := time.Now()
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, 1, code, "a stream outlived the graceful stop; stderr:\n%s", stderr)
	case <-time.After(2 * shutdownTimeout):
		t.Fatalf("run did not return within %v of cancellation; stderr:\n%s", 2*shutdownTimeout, stderr)
	}
	assert.GreaterOrEqual(t, time.Since(start), shutdownTimeout-time.Second, "the stream had the graceful time")
	assert.Contains(t, stderr.String(), "graceful shutdown of the gRPC server failed")
	_, err = open.ask(t, "paris")
	assert.Error(t, err, "the stream was cut off")
}

// TestGRPCRunStops: without calls in progress, the gRPC server stops at
// once with the HTTP one.
func TestGRPCRunStops(t *testing.T) {
	base, log := startServerLog(t, "-grpc-addr", "127.0.0.1:0")
	assert.Equal(t, http.StatusOK, getStatus(t, base+"/healthz", ""))
	assert.Contains(t, listeningLine(t, log.String()), " grpc=127.0.0.1:")
}

func TestRunGRPCAddrInvalid(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-grpc-addr", "9090"}, "geocoding: -grpc-addr 9090: want host:port, such as :9090 or 127.0.0.1:9090"},
		{[]string{"-grpc-addr", ":99999"}, `geocoding: -grpc-addr :99999: want a port number from 0 to 65535 after the colon, not "99999"`},
		{[]string{"-grpc-addr", "localhost:grpc-ish"}, `geocoding: -grpc-addr localhost:grpc-ish: want a port number`},
		{[]string{"-addr", ":8080", "-grpc-addr", ":8080"}, "geocoding: -grpc-addr :8080: the address of -addr"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stderr := runExit(t, tc.args...)
			assert.Equal(t, 2, code)
			assert.Contains(t, stderr, tc.want)
			assert.NotContains(t, stderr, "listening")
		})
	}
}

func TestRunGRPCListenError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	code, stderr := runExit(t, "-grpc-addr", l.Addr().String())
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, `msg="geocoding: cannot listen" grpc-addr=`+l.Addr().String())
}
