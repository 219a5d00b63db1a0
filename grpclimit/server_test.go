package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
	"github.com/tokenfair/ratelimit/storetest"
)

// echo is the service test.Echo, written by hand with well-known types
// (no generated code): the unary methods Echo and Other take a
// StringValue and answer a Struct {"name": value}; the bidi stream Chat
// answers each message so.
type echo struct {
	// handle answers the unary calls; nil: {"name": value}.
	handle func(ctx context.Context, in *wrapperspb.StringValue) (*structpb.Struct, error)
	// opened, if set, is told of each Chat stream before it receives.
	opened chan struct{}
}

func nameStruct(v string) *structpb.Struct {
	s, _ := structpb.NewStruct(map[string]any{"name": v})
	return s
}

func (e *echo) unary(ctx context.Context, in *wrapperspb.StringValue) (*structpb.Struct, error) {
	if e.handle != nil {
		return e.handle(ctx, in)
	}
	return nameStruct(in.GetValue()), nil
}

func unaryMethod(name string) grpc.MethodDesc {
	full := "/test.Echo/" + name
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, req any) (any, error) {
			return srv.(*echo).unary(ctx, req.(*wrapperspb.StringValue))
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
	}}
}

func chat(srv any, ss grpc.ServerStream) error {
	if e := srv.(*echo); e.opened != nil {
		e.opened <- struct{}{}
	}
	for {
		in := new(wrapperspb.StringValue)
		switch err := ss.RecvMsg(in); {
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
		if err := ss.SendMsg(nameStruct(in.GetValue())); err != nil {
			return err
		}
	}
}

var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{unaryMethod("Echo"), unaryMethod("Other")},
	Streams:     []grpc.StreamDesc{{StreamName: "Chat", Handler: chat, ServerStreams: true, ClientStreams: true}},
}

var chatDesc = &echoDesc.Streams[0]

// fakeClockLimiter returns a Limiter of policies on a memorystore read by clock.
func fakeClockLimiter(t *testing.T, clock *storetest.Clock, policies ...ratelimit.Policy) *ratelimit.Limiter {
	t.Helper()
	store, err := memorystore.New(&memorystore.Options{Clock: clock.Now})
	require.NoError(t, err)
	l, err := ratelimit.New(store, policies...)
	require.NoError(t, err)
	return l
}

// newLimitedServer returns a grpc.Server serving svc (and the health service)
// limited by NewServer(l, key, opts), stopped when t ends.
func newLimitedServer(t *testing.T, svc *echo, l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions) *grpc.Server {
	t.Helper()
	s, err := grpclimit.NewServer(l, key, opts)
	require.NoError(t, err)
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryInterceptor()), grpc.ChainStreamInterceptor(s.StreamInterceptor()))
	gs.RegisterService(&echoDesc, svc)
	healthpb.RegisterHealthServer(gs, health.NewServer())
	t.Cleanup(gs.Stop)
	return gs
}

// peerListener gives the connections it accepts the remote address addr,
// which grpc-go reports as the call's peer.
type peerListener struct {
	net.Listener
	addr net.Addr
}

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return peerConn{c, l.addr}, nil
}

type peerConn struct {
	net.Conn
	addr net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.addr }

// dialBufconn serves gs on a new bufconn listener whose connections come from
// the peer (IP:port; "" for bufconn's own address) and returns a client
// of it, closed when t ends.
func dialBufconn(t *testing.T, gs *grpc.Server, peer string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	var l net.Listener = lis
	if peer != "" {
		addr, err := net.ResolveTCPAddr("tcp", peer)
		require.NoError(t, err)
		l = peerListener{lis, addr}
	}
	go gs.Serve(l)
	opts = append([]grpc.DialOption{
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufconn", opts...)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// echoReply is what a unary call of the stock client got.
type echoReply struct {
	out             *structpb.Struct
	err             error
	header, trailer metadata.MD
}

// invokeEcho calls test.Echo/method with value and the metadata md (key,
// value, ...), as a grpc-go client does without generated code.
func invokeEcho(t *testing.T, conn *grpc.ClientConn, method, value string, md ...string) echoReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	r := echoReply{out: new(structpb.Struct)}
	r.err = conn.Invoke(ctx, "/test.Echo/"+method, wrapperspb.String(value), r.out, grpc.Header(&r.header), grpc.Trailer(&r.trailer))
	return r
}

// codeOf returns the code of r's error, OK for none.
func (r echoReply) code() codes.Code { return status.Code(r.err) }

// statusDetails returns the RetryInfo and QuotaFailure of err's status.
func statusDetails(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			ri = d
		case *errdetails.QuotaFailure:
			qf = d
		}
	}
	return ri, qf
}

// requireRefusal checks that err is the refusal of the policies, with a
// RetryInfo of wait and the pushback in trailer.
func requireRefusal(t *testing.T, err error, trailer metadata.MD, wait time.Duration, pushback string, policies ...string) {
	t.Helper()
	require.Equal(t, codes.ResourceExhausted.String(), status.Code(err).String(), "error %v", err)
	ri, qf := statusDetails(t, err)
	require.NotNil(t, ri, "RetryInfo in %v", status.Convert(err).Details())
	require.NotNil(t, qf, "QuotaFailure in %v", status.Convert(err).Details())
	assert.Equal(t, wait, ri.GetRetryDelay().AsDuration(), "RetryInfo.retry_delay")
	var subjects []string
	for _, v := range qf.GetViolations() {
		subjects = append(subjects, v.GetSubject())
	}
	assert.Equal(t, policies, subjects, "QuotaFailure subjects")
	assert.Equal(t, []string{pushback}, trailer.Get("grpc-retry-pushback-ms"), "trailer grpc-retry-pushback-ms")
}

// keyRecorder records the keys a policy's LimitFor sees, for the tests of keys.
type keyRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (k *keyRecorder) limitFor(key string) (ratelimit.Limit, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seen = append(k.seen, key)
	return ratelimit.Limit{}, false
}

// take returns the keys seen since the last take.
func (k *keyRecorder) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.seen
	k.seen = nil
	return s
}

var byXAPIKey = ratelimit.KeyByAPIKey("X-API-Key")

// discard is the Logger of the tests whose calls cannot be decided.
var discard = slog.New(slog.DiscardHandler)

func TestUnaryRefusal(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.PerSecond(2)})
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, byXAPIKey, &ratelimit.MiddlewareOptions{Clock: clock.Now}), "")

	first := invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k1")
	require.NoError(t, first.err)
	assert.Equal(t, "Paris", first.out.GetFields()["name"].GetStringValue())
	assert.Equal(t, []string{`"default";q=2;w=1`}, first.header.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"default";r=1;t=1`}, first.header.Get("ratelimit"))
	assert.Empty(t, first.trailer.Get("grpc-retry-pushback-ms"))

	second := invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k1")
	require.NoError(t, second.err)
	assert.Equal(t, []string{`"default";r=0;t=1`}, second.header.Get("ratelimit"))

	// A token every 500ms: 100.3ms later, the next comes in 399.7ms, told
	// as 400ms.
	clock.Advance(100*time.Millisecond + 300*time.Microsecond)
	third := invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k1")
	requireRefusal(t, third.err, third.trailer, 400*time.Millisecond, "400", "default")
	assert.Equal(t, "rate limited by policy default", status.Convert(third.err).Message())
	assert.Equal(t, []string{`"default";q=2;w=1`}, third.trailer.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"default";r=0;t=1`}, third.trailer.Get("ratelimit"))

	other := invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k2")
	assert.NoError(t, other.err, "another key has its own bucket")

	clock.Advance(400 * time.Millisecond)
	assert.NoError(t, invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k1").err, "after the wait")
}

// Refusals share a status only when they tell the same policy and the
// same wait, to the millisecond: interleaved refusals of two policies, and
// one policy's refusals a microsecond and a millisecond apart, each tell
// their own.
func TestRefusalsShareOnlyTheSameStatus(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	other := fakeClockLimiter(t, clock, ratelimit.Policy{Name: "other", Limit: ratelimit.PerSecond(1)})
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, byXAPIKey, &ratelimit.MiddlewareOptions{Clock: clock.Now}), "")
	otherConn := dialBufconn(t, newLimitedServer(t, &echo{}, other, byXAPIKey, &ratelimit.MiddlewareOptions{Clock: clock.Now}), "")
	require.NoError(t, invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k").err)
	require.NoError(t, invokeEcho(t, otherConn, "Echo", "Paris", "x-api-key", "k").err)

	for _, step := range []struct {
		advance time.Duration
		wait    time.Duration
		push    string
		other   bool // the other policy refuses too, after
	}{
		{0, time.Second, "1000", false},
		{time.Microsecond, time.Second, "1000", false}, // 999.999ms, told as 1s
		{time.Millisecond, 999 * time.Millisecond, "999", true},
		{0, 999 * time.Millisecond, "999", false},
		{250 * time.Millisecond, 749 * time.Millisecond, "749", true},
		{0, 749 * time.Millisecond, "749", true},
	} {
		clock.Advance(step.advance)
		r := invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k")
		requireRefusal(t, r.err, r.trailer, step.wait, step.push, "default")
		if step.other {
			r = invokeEcho(t, otherConn, "Echo", "Paris", "x-api-key", "k")
			requireRefusal(t, r.err, r.trailer, step.wait, step.push, "other")
		}
	}
}

func TestUnaryRefusalCalendarQuota(t *testing.T) {
	clock := new(storetest.Clock) // 2026-01-01T00:00Z
	clock.Advance(6 * time.Hour)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(1, time.UTC)})
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, byXAPIKey, &ratelimit.MiddlewareOptions{Clock: clock.Now}), "")

	first := invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k1")
	require.NoError(t, first.err)
	assert.Equal(t, []string{`"daily";q=1;w=86400`}, first.header.Get("ratelimit-policy"))

	spent := invokeEcho(t, conn, "Echo", "Paris", "x-api-key", "k1")
	requireRefusal(t, spent.err, spent.trailer, 18*time.Hour, "-1", "daily")
	assert.Equal(t, []string{`"daily";r=0;t=64800`}, spent.trailer.Get("ratelimit"))
}

// A grpc-go client with a retry policy in its service config, over a real
// loopback listener: it waits the pushback of a short wait, and never
// retries a spent calendar quota.
func TestStockClientRetryPolicy(t *testing.T) {
	const serviceConfig = `{"methodConfig": [{
		"name": [{"service": "grpc.health.v1.Health"}],
		"retryPolicy": {
			"maxAttempts": 3,
			"initialBackoff": "100s",
			"maxBackoff": "100s",
			"backoffMultiplier": 1,
			"retryableStatusCodes": ["RESOURCE_EXHAUSTED"]
		}
	}]}`

	// serve returns a client of a server limited by l, over loopback TCP,
	// and the function returning the times of the attempts it served since
	// it was last called.
	serve := func(t *testing.T, l *ratelimit.Limiter, opts *ratelimit.MiddlewareOptions) (healthpb.HealthClient, func() []time.Time) {
		s, err := grpclimit.NewServer(l, byXAPIKey, opts)
		require.NoError(t, err)
		var mu sync.Mutex
		var attempts []time.Time
		count := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			mu.Lock()
			attempts = append(attempts, time.Now())
			mu.Unlock()
			return h(ctx, req)
		}
		gs := grpc.NewServer(grpc.ChainUnaryInterceptor(count, s.UnaryInterceptor()))
		healthpb.RegisterHealthServer(gs, health.NewServer())
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go gs.Serve(lis)
		t.Cleanup(gs.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultServiceConfig(serviceConfig))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		return healthpb.NewHealthClient(conn), func() []time.Time {
			mu.Lock()
			defer mu.Unlock()
			a := attempts
			attempts = nil
			return a
		}
	}
	check := func(c healthpb.HealthClient, opts ...grpc.CallOption) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", "k1")
		_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
		return err
	}

	t.Run("short wait", func(t *testing.T) {
		// The real clock: the client really waits.
		store, err := memorystore.New(nil)
		require.NoError(t, err)
		l, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(1, 200*time.Millisecond)})
		require.NoError(t, err)
		var refusedWait atomic.Int64
		client, attempts := serve(t, l, &ratelimit.MiddlewareOptions{Observe: func(_ *http.Request, ev ratelimit.Event) {
			if ev.Err == nil && !ev.Result.Allowed {
				refusedWait.Store(int64(ev.Result.RetryAfter))
			}
		}})

		require.NoError(t, check(client))
		require.Len(t, attempts(), 1)

		require.NoError(t, check(client), "the second call, retried after the pushback")
		a := attempts()
		require.Len(t, a, 2, "the refused attempt and its retry")
		wait := time.Duration(refusedWait.Load())
		require.Positive(t, wait, "the first attempt was refused")
		gap := a[1].Sub(a[0])
		assert.GreaterOrEqual(t, gap, wait, "the retry waited the pushback")
		assert.Less(t, gap, wait+2*time.Second, "the pushback replaced the 100s backoff")
	})

	t.Run("spent calendar quota", func(t *testing.T) {
		clock := new(storetest.Clock)
		clock.Advance(12 * time.Hour)
		l := fakeClockLimiter(t, clock, ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(1, time.UTC)})
		client, attempts := serve(t, l, &ratelimit.MiddlewareOptions{Clock: clock.Now})

		require.NoError(t, check(client))
		require.Len(t, attempts(), 1)

		var trailer metadata.MD
		err := check(client, grpc.Trailer(&trailer))
		requireRefusal(t, err, trailer, 12*time.Hour, "-1", "daily")
		assert.Len(t, attempts(), 1, "pushback -1: no retry")
	})
}

func TestKeyAPIKeyOneQuotaAcrossHTTPAndGRPC(t *testing.T) {
	clock := new(storetest.Clock)
	var k keyRecorder
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(3, time.Minute), LimitFor: k.limitFor})
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, byXAPIKey, &ratelimit.MiddlewareOptions{Clock: clock.Now}), "")

	mw, err := ratelimit.NewMiddleware(l, byXAPIKey, &ratelimit.MiddlewareOptions{Clock: clock.Now})
	require.NoError(t, err)
	web := nethttp.Wrap(mw)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	get := func(apiKey string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/geocode?q=Paris", nil)
		r.Header.Set("X-API-Key", apiKey)
		web.ServeHTTP(w, r)
		return w
	}

	want := ratelimit.KeyOfAPIKey("X-API-Key", "k1")
	require.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").err)
	assert.Equal(t, []string{want}, k.take(), "the key of metadata x-api-key")
	require.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", " k1 ").err, "trimmed as over HTTP")
	w := get("k1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, []string{`"default";r=0;t=20`}, w.Header()["RateLimit"], "the third token of the bucket")
	assert.Equal(t, []string{want, want}, k.take())

	refused := invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1")
	requireRefusal(t, refused.err, refused.trailer, 20*time.Second, "20000", "default")
	assert.Equal(t, http.StatusTooManyRequests, get("k1").Code)
	assert.Equal(t, http.StatusOK, get("k2").Code)
}

func TestKeyAuthorizationCanonical(t *testing.T) {
	clock := new(storetest.Clock)
	var k keyRecorder
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(1, time.Hour), LimitFor: k.limitFor})
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, ratelimit.KeyByAPIKey("Authorization"), nil), "")

	require.NoError(t, invokeEcho(t, conn, "Echo", "a", "authorization", "Bearer t").err)
	r := invokeEcho(t, conn, "Echo", "a", "authorization", "bearer  t")
	assert.Equal(t, codes.ResourceExhausted, r.code(), "one client: %v", r.err)
	want := ratelimit.KeyOfAPIKey("Authorization", "Bearer t")
	assert.Equal(t, []string{want, want}, k.take())
}

func TestKeyMissing(t *testing.T) {
	l := fakeClockLimiter(t, new(storetest.Clock), ratelimit.Policy{Limit: ratelimit.Per(1, time.Hour)})
	ran := false
	svc := &echo{handle: func(context.Context, *wrapperspb.StringValue) (*structpb.Struct, error) {
		ran = true
		return &structpb.Struct{}, nil
	}}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, &ratelimit.MiddlewareOptions{Logger: discard}), "")

	r := invokeEcho(t, conn, "Echo", "a")
	assert.Equal(t, codes.Unauthenticated, r.code())
	assert.Equal(t, "ratelimit: the call carries no client key", status.Convert(r.err).Message())
	assert.Empty(t, r.trailer.Get("grpc-retry-pushback-ms"))
	r = invokeEcho(t, conn, "Echo", "a", "x-api-key", "a", "x-api-key", "b")
	assert.Equal(t, codes.InvalidArgument, r.code(), "two API keys, as two lines over HTTP")
	assert.Equal(t, "ratelimit: the call cannot be limited as it is", status.Convert(r.err).Message())
	assert.False(t, ran, "the handler never ran")
}

func TestKeyByIPPeer(t *testing.T) {
	clock := new(storetest.Clock)
	var k keyRecorder
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(100, time.Hour), LimitFor: k.limitFor})
	byIP, err := ratelimit.KeyByIP(&ratelimit.IPOptions{TrustedProxies: []string{"10.0.0.0/8"}, Quiet: true})
	require.NoError(t, err)
	gs := newLimitedServer(t, &echo{}, l, byIP, &ratelimit.MiddlewareOptions{Logger: discard})

	for _, tc := range []struct {
		peer string
		md   []string
		want string
	}{
		{peer: "[2001:db8:1:2::1]:5000", want: "ip:2001:db8:1:2::/64"},
		{peer: "[2001:db8:1:2:ffff:ffff:ffff:ffff]:6000", want: "ip:2001:db8:1:2::/64"},
		{peer: "[2001:db8:1:3::1]:5000", want: "ip:2001:db8:1:3::/64"},
		{peer: "[::ffff:203.0.113.7]:5000", want: "ip:203.0.113.7"},
		// A client that is no trusted proxy cannot choose its key.
		{peer: "203.0.113.7:5000", md: []string{"x-forwarded-for", "198.51.100.9"}, want: "ip:203.0.113.7"},
		// A trusted proxy's is believed: the rightmost untrusted entry.
		{peer: "10.0.0.2:5000", md: []string{"x-forwarded-for", "192.0.2.1, 198.51.100.9, 10.1.1.1"}, want: "ip:198.51.100.9"},
		{peer: "10.0.0.2:5000", md: []string{"x-forwarded-for", "2001:db8:9:9::1"}, want: "ip:2001:db8:9:9::/64"},
		{peer: "10.0.0.2:5000", want: "ip:10.0.0.2"},
	} {
		conn := dialBufconn(t, gs, tc.peer)
		r := invokeEcho(t, conn, "Echo", "a", tc.md...)
		require.NoError(t, r.err, "from %s with %q", tc.peer, tc.md)
		assert.Equal(t, []string{tc.want}, k.take(), "key of a call from %s with %q", tc.peer, tc.md)
	}

	// bufconn's own address is no IP address: the call cannot be keyed.
	r := invokeEcho(t, dialBufconn(t, gs, ""), "Echo", "a")
	assert.Equal(t, codes.InvalidArgument, r.code())
}

func TestKeyByMethod(t *testing.T) {
	l := fakeClockLimiter(t, new(storetest.Clock), ratelimit.Policy{Limit: ratelimit.Per(1, time.Hour)})
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, ratelimit.JoinKeyFuncs(grpclimit.KeyByMethod, byXAPIKey), nil), "")

	assert.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").err)
	assert.Equal(t, codes.ResourceExhausted, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").code())
	assert.NoError(t, invokeEcho(t, conn, "Other", "a", "x-api-key", "k1").err, "another method, another bucket")
	assert.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k2").err, "another client, another bucket")
}

// openChat opens a Chat stream with the metadata md and waits until its
// handler runs.
func openChat(t *testing.T, conn *grpc.ClientConn, svc *echo, md ...string) grpc.ClientStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	cs, err := conn.NewStream(metadata.AppendToOutgoingContext(ctx, md...), chatDesc, "/test.Echo/Chat")
	require.NoError(t, err)
	select {
	case <-svc.opened:
	case <-ctx.Done():
		t.Fatal("the stream's handler never ran")
	}
	return cs
}

// sendChat sends value on cs and returns the answer, or the error that ended
// the stream.
func sendChat(t *testing.T, cs grpc.ClientStream, value string) (string, error) {
	t.Helper()
	if err := cs.SendMsg(wrapperspb.String(value)); err != nil && err != io.EOF {
		return "", err
	}
	out := new(structpb.Struct)
	if err := cs.RecvMsg(out); err != nil {
		return "", err
	}
	return out.GetFields()["name"].GetStringValue(), nil
}

func TestStreamPerMessage(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(3, time.Minute)})
	var decisions atomic.Int64
	svc := &echo{opened: make(chan struct{}, 1)}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, &ratelimit.MiddlewareOptions{Clock: clock.Now,
		Observe: func(*http.Request, ratelimit.Event) { decisions.Add(1) }}), "")

	cs := openChat(t, conn, svc, "x-api-key", "k1")
	assert.Zero(t, decisions.Load(), "opening a stream costs nothing")
	for i, v := range []string{"Paris", "Lyon", "Nice"} {
		got, err := sendChat(t, cs, v)
		require.NoError(t, err, "message %d", i)
		assert.Equal(t, v, got)
	}
	hdr, err := cs.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";r=2;t=20`}, hdr.Get("ratelimit"), "the first message's")
	assert.Equal(t, []string{`"default";q=3;w=60`}, hdr.Get("ratelimit-policy"))

	_, err = sendChat(t, cs, "Lille")
	requireRefusal(t, err, cs.Trailer(), 20*time.Second, "20000", "default")
	assert.Equal(t, []string{`"default";r=0;t=20`}, cs.Trailer().Get("ratelimit"))
	assert.EqualValues(t, 4, decisions.Load(), "one decision a message")

	// A new stream opens, and its first message is refused.
	cs = openChat(t, conn, svc, "x-api-key", "k1")
	assert.EqualValues(t, 4, decisions.Load(), "opening a stream costs nothing")
	_, err = sendChat(t, cs, "Paris")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))

	// The tokens come back one by one.
	clock.Advance(20 * time.Second)
	cs = openChat(t, conn, svc, "x-api-key", "k1")
	got, err := sendChat(t, cs, "Paris")
	require.NoError(t, err)
	assert.Equal(t, "Paris", got)
	_, err = sendChat(t, cs, "Lyon")
	requireRefusal(t, err, cs.Trailer(), 20*time.Second, "20000", "default")
	assert.EqualValues(t, 7, decisions.Load())
}

func TestStreamCostOfMessage(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(5, time.Minute)})
	svc := &echo{opened: make(chan struct{}, 1)}
	cost := func(r *http.Request) (int64, error) {
		m, ok := grpclimit.Message(r.Context()).(*wrapperspb.StringValue)
		if !ok {
			return 0, errors.New("no message")
		}
		return int64(len(m.GetValue())), nil
	}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, &ratelimit.MiddlewareOptions{Cost: cost, Logger: discard}), "")

	cs := openChat(t, conn, svc, "x-api-key", "k1")
	for _, v := range []string{"ab", "cd"} {
		got, err := sendChat(t, cs, v)
		require.NoError(t, err)
		assert.Equal(t, v, got)
	}
	_, err := sendChat(t, cs, "xy") // 2 tokens, 1 left
	requireRefusal(t, err, cs.Trailer(), 12*time.Second, "12000", "default")

	cs = openChat(t, conn, svc, "x-api-key", "k1")
	got, err := sendChat(t, cs, "z") // the one left
	require.NoError(t, err)
	assert.Equal(t, "z", got)
	_, err = sendChat(t, cs, "") // a cost below 1
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

func TestStreamShapingWait(t *testing.T) {
	clock := new(storetest.Clock) // the store's time stands still: each wait is the whole interval
	const interval = 50 * time.Millisecond
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(1, interval), Algorithm: ratelimit.LeakyShape})
	svc := &echo{opened: make(chan struct{}, 1)}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, nil), "")

	cs := openChat(t, conn, svc, "x-api-key", "k1")
	_, err := sendChat(t, cs, "a")
	require.NoError(t, err)
	start := time.Now()
	_, err = sendChat(t, cs, "b")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), interval, "the second message waited its turn")

	require.NoError(t, cs.CloseSend())
	require.Equal(t, io.EOF, cs.RecvMsg(new(structpb.Struct)))
	assert.NotEmpty(t, cs.Trailer().Get("ratelimit"), "the last message's, in the trailers")
	assert.Empty(t, cs.Trailer().Get("grpc-retry-pushback-ms"))
}

func TestUnaryShapingWait(t *testing.T) {
	clock := new(storetest.Clock)
	const interval = 50 * time.Millisecond
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(1, interval).WithBurst(3), Algorithm: ratelimit.LeakyShape})
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, byXAPIKey, nil), "")

	require.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").err)
	start := time.Now()
	require.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").err)
	assert.GreaterOrEqual(t, time.Since(start), interval, "the second call waited its turn")

	// A call whose deadline comes before its turn is refused at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var trailer metadata.MD
	err := conn.Invoke(metadata.AppendToOutgoingContext(ctx, "x-api-key", "k1"), "/test.Echo/Echo",
		wrapperspb.String("a"), new(structpb.Struct), grpc.Trailer(&trailer))
	requireRefusal(t, err, trailer, 2*interval, "100", "default")
}

func TestCountIfLoginGuard(t *testing.T) {
	l := fakeClockLimiter(t, new(storetest.Clock), ratelimit.Policy{Limit: ratelimit.Per(2, time.Hour)})
	svc := &echo{handle: func(_ context.Context, in *wrapperspb.StringValue) (*structpb.Struct, error) {
		if in.GetValue() != "secret" {
			return nil, status.Error(codes.Unauthenticated, "wrong password")
		}
		return &structpb.Struct{}, nil
	}}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, &ratelimit.MiddlewareOptions{CountIf: func(s int) bool { return s == 401 }}), "")

	for i := range 5 {
		assert.NoError(t, invokeEcho(t, conn, "Echo", "secret", "x-api-key", "k1").err, "good login %d, not counted", i)
	}
	for i := range 2 {
		assert.Equal(t, codes.Unauthenticated, invokeEcho(t, conn, "Echo", "guess", "x-api-key", "k1").code(), "failed login %d", i)
	}
	assert.Equal(t, codes.ResourceExhausted, invokeEcho(t, conn, "Echo", "secret", "x-api-key", "k1").code(), "two failures spent the budget")
}

// CountIf sees the HTTP status of each gRPC code.
func TestCountIfStatusOfCode(t *testing.T) {
	l := fakeClockLimiter(t, new(storetest.Clock), ratelimit.Policy{Limit: ratelimit.Per(1000, time.Hour)})
	var code atomic.Int32
	svc := &echo{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*structpb.Struct, error) {
		switch c := codes.Code(code.Load()); c {
		case codes.OK:
			return &structpb.Struct{}, nil
		case codes.Canceled:
			return nil, context.Canceled // as grpc-go answers it, Canceled
		case codes.DeadlineExceeded:
			return nil, context.DeadlineExceeded
		default:
			return nil, status.Error(c, "failed")
		}
	}}
	var seen atomic.Int64
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, &ratelimit.MiddlewareOptions{CountIf: func(s int) bool {
		seen.Store(int64(s))
		return true
	}}), "")

	for c, want := range map[codes.Code]int{
		codes.OK: 200, codes.InvalidArgument: 400, codes.FailedPrecondition: 400, codes.OutOfRange: 400,
		codes.Unauthenticated: 401, codes.PermissionDenied: 403, codes.NotFound: 404,
		codes.AlreadyExists: 409, codes.Aborted: 409, codes.ResourceExhausted: 429, codes.Canceled: 499,
		codes.Unimplemented: 501, codes.Unavailable: 503, codes.DeadlineExceeded: 504,
		codes.Unknown: 500, codes.Internal: 500, codes.DataLoss: 500,
	} {
		code.Store(int32(c))
		invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1")
		assert.EqualValues(t, want, seen.Load(), "CountIf's status of %v", c)
	}
	other := errors.New("not a status")
	svc.handle = func(context.Context, *wrapperspb.StringValue) (*structpb.Struct, error) { return nil, other }
	invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1")
	assert.EqualValues(t, 500, seen.Load(), "CountIf's status of a plain error")
}

func TestResultInContextSettle(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(10, time.Hour)})
	var remaining []int64
	var settleErr error
	svc := &echo{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*structpb.Struct, error) {
		res, ok := ratelimit.ResultFrom(ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "no decision")
		}
		remaining = append(remaining, res.Remaining)
		if in.GetValue() == "heavy" {
			settleErr = ratelimit.Settle(ctx, "requests", 4)
		}
		return &structpb.Struct{}, nil
	}}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, &ratelimit.MiddlewareOptions{ResultInContext: true}), "")

	require.NoError(t, invokeEcho(t, conn, "Echo", "heavy", "x-api-key", "k1").err)
	require.NoError(t, settleErr)
	r := invokeEcho(t, conn, "Echo", "light", "x-api-key", "k1")
	require.NoError(t, r.err)
	assert.Equal(t, []int64{9, 5}, remaining, "the heavy call settled at 4 tokens: 10-4-1")
}

func TestCostsWithUnits(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock,
		ratelimit.Policy{Name: "calls", Limit: ratelimit.Per(10, time.Hour)},
		ratelimit.Policy{Name: "tokens", Unit: "tokens", Limit: ratelimit.Per(100, time.Hour)})
	var results []ratelimit.Result
	svc := &echo{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*structpb.Struct, error) {
		res, _ := ratelimit.ResultFrom(ctx)
		results = append(results, res)
		if err := ratelimit.Settle(ctx, "tokens", int64(2*len(in.GetValue()))); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return &structpb.Struct{}, nil
	}}
	estimate := func(r *http.Request) (int64, error) {
		return int64(10 * len(grpclimit.Message(r.Context()).(*wrapperspb.StringValue).GetValue())), nil
	}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, &ratelimit.MiddlewareOptions{ResultInContext: true,
		Costs: map[string]func(*http.Request) (int64, error){"tokens": estimate}}), "")

	require.NoError(t, invokeEcho(t, conn, "Echo", "abcde", "x-api-key", "k1").err) // reserves 50 tokens, settles 10
	require.NoError(t, invokeEcho(t, conn, "Echo", "abc", "x-api-key", "k1").err)   // 30 of the 90 left
	require.Len(t, results, 2)
	left := func(res ratelimit.Result) []int64 {
		var out []int64
		for _, r := range res.Results {
			out = append(out, r.Remaining)
		}
		return out
	}
	assert.Equal(t, []int64{9, 50}, left(results[0]))
	assert.Equal(t, []int64{8, 60}, left(results[1]))

	// 84 tokens left: an estimate of 90 is refused by the tokens policy.
	r := invokeEcho(t, conn, "Echo", "123456789", "x-api-key", "k1")
	requireRefusal(t, r.err, r.trailer, 216*time.Second, "216000", "tokens")
}

func TestDryRunNeverRefuses(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(1, time.Hour), DryRun: true})
	var wouldRefuse atomic.Int64
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, byXAPIKey, &ratelimit.MiddlewareOptions{
		Observe: func(_ *http.Request, ev ratelimit.Event) {
			for _, r := range ev.Result.Results {
				if !r.Allowed {
					wouldRefuse.Add(1)
				}
			}
		}}), "")

	for i := range 3 {
		r := invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1")
		require.NoError(t, r.err, "call %d", i)
		assert.Empty(t, r.header.Get("ratelimit"), "dry-run policies are invisible")
	}
	assert.EqualValues(t, 2, wouldRefuse.Load(), "counted: the last two would have been refused")
}

// downStore fails as a store whose server is down.
type downStore struct{}

func (downStore) Take(context.Context, *ratelimit.Policy, string, int64) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.New("dial tcp 10.1.2.3:6379: connect: connection refused")
}

func TestStoreFailure(t *testing.T) {
	l, err := ratelimit.New(downStore{}, ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	require.NoError(t, err)
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, byXAPIKey, &ratelimit.MiddlewareOptions{Logger: discard}), "")

	r := invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1")
	assert.Equal(t, codes.Unavailable, r.code())
	assert.Equal(t, "ratelimit: the rate limiter is unavailable", status.Convert(r.err).Message())
	assert.NotContains(t, r.err.Error(), "10.1.2.3", "the store's error stays on the server")
	ri, _ := statusDetails(t, r.err)
	require.NotNil(t, ri)
	assert.Equal(t, time.Second, ri.GetRetryDelay().AsDuration())
	assert.Equal(t, []string{"1000"}, r.trailer.Get("grpc-retry-pushback-ms"))
}

func TestSkipBlockSafe(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(1, time.Hour)})
	ran := 0
	svc := &echo{handle: func(ctx context.Context, in *wrapperspb.StringValue) (*structpb.Struct, error) {
		ran++
		return &structpb.Struct{}, nil
	}}
	byIP, err := ratelimit.KeyByIP(nil)
	require.NoError(t, err)
	gs := newLimitedServer(t, svc, l, byIP, &ratelimit.MiddlewareOptions{
		Skip:  func(r *http.Request) bool { return r.URL.Path == "/test.Echo/Other" },
		Block: []string{"198.51.100.0/24"},
		Safe:  []string{"192.0.2.1"},
	})

	client := dialBufconn(t, gs, "203.0.113.7:5000")
	for i := range 3 {
		r := invokeEcho(t, client, "Other", "a")
		require.NoError(t, r.err, "skipped call %d", i)
		assert.Empty(t, r.header.Get("ratelimit"), "a skipped call has no decision")
	}
	assert.NoError(t, invokeEcho(t, client, "Echo", "a").err)
	assert.Equal(t, codes.ResourceExhausted, invokeEcho(t, client, "Echo", "a").code(), "the skipped calls spent nothing")

	safe := dialBufconn(t, gs, "192.0.2.1:5000")
	for range 3 {
		assert.NoError(t, invokeEcho(t, safe, "Echo", "a").err)
	}
	blocked := invokeEcho(t, dialBufconn(t, gs, "198.51.100.9:5000"), "Echo", "a")
	assert.Equal(t, codes.PermissionDenied, blocked.code())
	assert.Equal(t, 7, ran, "the handler ran for the admitted calls only")
}

func TestPenaltyBox(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(1, time.Second),
		Penalty: ratelimit.Penalty{After: 2, Within: time.Minute, For: time.Hour}})
	conn := dialBufconn(t, newLimitedServer(t, &echo{}, l, byXAPIKey, nil), "")

	require.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").err)
	assert.Equal(t, codes.ResourceExhausted, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").code())
	assert.Equal(t, codes.ResourceExhausted, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").code())
	clock.Advance(time.Minute) // the bucket is full again, but the key is banned
	r := invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1")
	requireRefusal(t, r.err, r.trailer, time.Hour-time.Minute, "-1", "default/ban")
}

func TestMaxInFlight(t *testing.T) {
	l := fakeClockLimiter(t, new(storetest.Clock), ratelimit.Policy{Limit: ratelimit.Per(100, time.Hour)})
	entered, release := make(chan struct{}), make(chan struct{})
	svc := &echo{handle: func(_ context.Context, in *wrapperspb.StringValue) (*structpb.Struct, error) {
		if in.GetValue() == "slow" {
			entered <- struct{}{}
			<-release
		}
		return &structpb.Struct{}, nil
	}}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, &ratelimit.MiddlewareOptions{MaxInFlight: 1}), "")

	done := make(chan error)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- conn.Invoke(metadata.AppendToOutgoingContext(ctx, "x-api-key", "k1"), "/test.Echo/Echo",
			wrapperspb.String("slow"), new(structpb.Struct))
	}()
	<-entered
	r := invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1")
	requireRefusal(t, r.err, r.trailer, time.Second, "1000", "inflight")
	assert.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k2").err, "another key")
	close(release)
	require.NoError(t, <-done)
	assert.NoError(t, invokeEcho(t, conn, "Echo", "a", "x-api-key", "k1").err, "the slot is free again")
}

// A handler's panic goes through the interceptor as it would without it,
// and the call's cost goes back (CountIf).
func TestHandlerPanic(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Limit: ratelimit.Per(1, time.Hour)})
	s, err := grpclimit.NewServer(l, byXAPIKey, &ratelimit.MiddlewareOptions{CountIf: func(int) bool { return true }})
	require.NoError(t, err)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "k1"))
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Echo/Echo"}
	boom := errors.New("boom")
	assert.PanicsWithValue(t, boom, func() {
		_, _ = s.UnaryInterceptor()(ctx, wrapperspb.String("a"), info, func(context.Context, any) (any, error) { panic(boom) })
	})
	_, err = s.UnaryInterceptor()(ctx, wrapperspb.String("a"), info, func(context.Context, any) (any, error) { return "ok", nil })
	assert.NoError(t, err, "the panicking call gave its token back")
}

func TestNewServerErrors(t *testing.T) {
	l := fakeClockLimiter(t, new(storetest.Clock), ratelimit.Policy{Limit: ratelimit.PerSecond(1)})
	for _, tc := range []struct {
		l    *ratelimit.Limiter
		key  ratelimit.KeyFunc
		opts *ratelimit.MiddlewareOptions
		want string
	}{
		{nil, byXAPIKey, nil, "grpclimit: NewServer: ratelimit: NewMiddleware: nil limiter"},
		{l, nil, nil, "grpclimit: NewServer: ratelimit: NewMiddleware: nil key function"},
		{l, byXAPIKey, &ratelimit.MiddlewareOptions{OnDeny: func(http.ResponseWriter, *http.Request, ratelimit.Result) {}}, "MiddlewareOptions.OnDeny"},
		{l, byXAPIKey, &ratelimit.MiddlewareOptions{OnError: func(http.ResponseWriter, *http.Request, error) {}}, "MiddlewareOptions.OnError"},
		{l, byXAPIKey, &ratelimit.MiddlewareOptions{MaxInFlight: -1}, "MaxInFlight -1"},
	} {
		s, err := grpclimit.NewServer(tc.l, tc.key, tc.opts)
		assert.Nil(t, s)
		if assert.Error(t, err) {
			assert.True(t, strings.HasPrefix(err.Error(), "grpclimit: NewServer: "), "error %q", err)
			assert.Contains(t, err.Error(), tc.want)
		}
	}
	_, err := grpclimit.NewServer(l, byXAPIKey, nil)
	assert.NoError(t, err, "nil options: the defaults")
}

func TestMessageOutsideADecision(t *testing.T) {
	assert.Nil(t, grpclimit.Message(context.Background()))
}

// BenchmarkUnaryInterceptor is the interceptor's own cost for a call,
// admitted and refused, without a transport: bench/ compares whole calls.
func BenchmarkUnaryInterceptor(b *testing.B) {
	for _, bc := range []struct {
		name  string
		limit ratelimit.Limit
	}{
		{"allowed", ratelimit.PerSecond(1_000_000_000).WithBurst(1_000_000_000)},
		{"refused", ratelimit.Per(1, 24*time.Hour)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			store, err := memorystore.New(nil)
			require.NoError(b, err)
			l, err := ratelimit.New(store, ratelimit.Policy{Limit: bc.limit})
			require.NoError(b, err)
			s, err := grpclimit.NewServer(l, byXAPIKey, &ratelimit.MiddlewareOptions{Quiet: true})
			require.NoError(b, err)
			intercept := s.UnaryInterceptor()
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
				":authority", "bufconn", "content-type", "application/grpc", "user-agent", "grpc-go/1.85.0", "x-api-key", "k1"))
			ctx = grpc.NewContextWithServerTransportStream(ctx, nullTransportStream{})
			info := &grpc.UnaryServerInfo{FullMethod: "/test.Echo/Echo"}
			in := wrapperspb.String("Paris")
			handler := func(context.Context, any) (any, error) { return in, nil }
			_, _ = intercept(ctx, in, info, handler) // the refused one's only token
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := intercept(ctx, in, info, handler); (err != nil) != (bc.name == "refused") {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// nullTransportStream is where grpc.SetHeader and grpc.SetTrailer put
// metadata outside a grpc.Server: nowhere.
type nullTransportStream struct{}

func (nullTransportStream) Method() string               { return "/test.Echo/Echo" }
func (nullTransportStream) SetHeader(metadata.MD) error  { return nil }
func (nullTransportStream) SendHeader(metadata.MD) error { return nil }
func (nullTransportStream) SetTrailer(metadata.MD) error { return nil }

// A policy of content-bytes charges a unary call the size of its answer
// in the wire format, so that gRPC is no way around a budget of bytes.
func TestContentBytesOfAnswer(t *testing.T) {
	clock := new(storetest.Clock)
	l := fakeClockLimiter(t, clock, ratelimit.Policy{Name: "bytes", Unit: "content-bytes", Limit: ratelimit.Per(1000, time.Hour)})
	answer := nameStruct("a name of some length")
	svc := &echo{handle: func(context.Context, *wrapperspb.StringValue) (*structpb.Struct, error) { return answer, nil }}
	conn := dialBufconn(t, newLimitedServer(t, svc, l, byXAPIKey, nil), "")
	for range 3 {
		require.NoError(t, invokeEcho(t, conn, "Echo", "x", "x-api-key", "k1").err)
	}
	res, err := l.Take(context.Background(), ratelimit.KeyOfAPIKey("X-API-Key", "k1"), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1000-3*proto.Size(answer)), res.Remaining, "three answers of %d bytes", proto.Size(answer))
}
