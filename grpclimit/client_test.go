package grpclimit

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/pace"
)

// pacedServer answers call n (0 first) with what its script returns, after
// the script set its metadata, and records when each call came.
type pacedServer struct {
	script func(ctx context.Context, n int) error
	start  time.Time
	mu     sync.Mutex
	calls  []time.Duration // since start
}

func (p *pacedServer) handle(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
	if err := dec(new(wrapperspb.StringValue)); err != nil {
		return nil, err
	}
	p.mu.Lock()
	n := len(p.calls)
	p.calls = append(p.calls, time.Since(p.start))
	p.mu.Unlock()
	if err := p.script(ctx, n); err != nil {
		return nil, err
	}
	return new(structpb.Struct), nil
}

func (p *pacedServer) seen() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.calls...)
}

// startPaced starts a pacedServer of script over bufconn, and returns a
// ClientConn to it whose unary calls go through UnaryClientInterceptor(opts).
// In a synctest bubble, its time is the bubble's.
func startPaced(t *testing.T, opts *pace.Options, script func(ctx context.Context, n int) error) (*grpc.ClientConn, *pacedServer) {
	t.Helper()
	p := &pacedServer{script: script, start: time.Now()}
	lis := bufconn.Listen(1 << 16)
	s := grpc.NewServer()
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "grpclimit.test.Paced",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Call", Handler: p.handle}},
	}, struct{}{})
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient("passthrough:///paced",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(UnaryClientInterceptor(opts)))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc, p
}

func callPaced(ctx context.Context, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
	return cc.Invoke(ctx, "/grpclimit.test.Paced/Call", wrapperspb.String("hi"), new(structpb.Struct), opts...)
}

// declareQuota declares a quota of q per w seconds, r left, more in t s.
func declareQuota(ctx context.Context, q, w, r, t int) {
	grpc.SetHeader(ctx, metadata.Pairs(
		"ratelimit-policy", fmt.Sprintf(`"default";q=%d;w=%d`, q, w),
		"ratelimit", fmt.Sprintf(`"default";r=%d;t=%d`, r, t)))
}

var pacedPolicy = ratelimit.Policy{Name: "default", Limit: ratelimit.PerSecond(10)}

// refuse returns the refusal of a call by the Server, with a RetryInfo of
// wait, and sets its pushback trailer to pb unless it is "".
func refuse(ctx context.Context, wait time.Duration, pb string) error {
	if pb != "" {
		grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, pb))
	}
	return refusal(ratelimit.Result{Policy: &pacedPolicy, RetryAfter: wait}).err
}

// retryInfo returns a RESOURCE_EXHAUSTED with a RetryInfo of d, valid or not.
func retryInfo(d *durationpb.Duration) error {
	st, _ := status.New(codes.ResourceExhausted, "refused").WithDetails(&errdetails.RetryInfo{RetryDelay: d})
	return st.Err()
}

// pushbackOnly returns a bare RESOURCE_EXHAUSTED with a pushback of pb.
func pushbackOnly(ctx context.Context, pb string) error {
	grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, pb))
	return status.Error(codes.ResourceExhausted, "refused")
}

// firstOnly returns a script that answers the first call with answer.
func firstOnly(answer func(ctx context.Context) error) func(context.Context, int) error {
	return func(ctx context.Context, n int) error {
		if n == 0 {
			return answer(ctx)
		}
		return nil
	}
}

// windowLimiter returns the script of a limiter of q calls per fixed
// second, which declares what is left.
func windowLimiter(q int) func(ctx context.Context, n int) error {
	var mu sync.Mutex
	var window time.Time
	var used int
	return func(ctx context.Context, _ int) error {
		mu.Lock()
		defer mu.Unlock()
		if w := time.Now().Truncate(time.Second); w != window {
			window, used = w, 0
		}
		used++
		declareQuota(ctx, q, 1, q-used, 1)
		return nil
	}
}

func TestClientRetriesAfterRetryDelay(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(ctx context.Context) error
		want   time.Duration // RetryInfo's, or the pushback's, rounded up to the second
	}{
		{"RetryInfo", func(ctx context.Context) error { return refuse(ctx, 1500*time.Millisecond, "") }, 2 * time.Second},
		{"RetryInfo of 1s1ns", func(ctx context.Context) error { return retryInfo(&durationpb.Duration{Seconds: 1, Nanos: 1}) }, 2 * time.Second},
		{"pushback", func(ctx context.Context) error { return pushbackOnly(ctx, "700") }, time.Second},
		{"the longer of both", func(ctx context.Context) error { return refuse(ctx, time.Second, "2500") }, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cc, srv := startPaced(t, nil, firstOnly(tc.answer))
				var tlr metadata.MD
				require.NoError(t, callPaced(t.Context(), cc, grpc.Trailer(&tlr)))
				assert.Equal(t, []time.Duration{0, tc.want}, srv.seen())
				assert.NotNil(t, tlr, "the caller's own Trailer option is filled")
			})
		})
	}
}

func TestClientReturnsUnretriedRefusal(t *testing.T) {
	for name, answer := range map[string]func(ctx context.Context) error{
		"negative pushback": func(ctx context.Context) error { return refuse(ctx, 3*time.Second, "-1") },
		"unavailable": func(ctx context.Context) error { // its handler may have run
			grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, "1000"))
			return unavailable("ratelimit: the store failed").Err()
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var sent error
				cc, srv := startPaced(t, nil, firstOnly(func(ctx context.Context) error {
					sent = answer(ctx)
					return sent
				}))
				err := callPaced(t.Context(), cc)
				assert.True(t, proto.Equal(status.Convert(sent).Proto(), status.Convert(err).Proto()), "the status, as it came: %v", err)
				require.NoError(t, callPaced(t.Context(), cc))
				assert.Equal(t, []time.Duration{0, 0}, srv.seen(), "no retry, no wait")
			})
		})
	}
}

func TestClientFailsAtOnceBeyondMaxWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc, srv := startPaced(t, &pace.Options{MaxWait: 10 * time.Second}, func(ctx context.Context, _ int) error {
			return refuse(ctx, time.Minute, "60000")
		})
		start := time.Now()
		err := callPaced(t.Context(), cc)
		assert.Equal(t, time.Duration(0), time.Since(start))
		var we *pace.WaitError
		require.ErrorAs(t, err, &we)
		assert.EqualError(t, err, "grpclimit: pace: a wait of 1m0s for the Retry-After of a 429 from passthrough:///paced is longer than the 10s the request may still wait (Options.MaxWait)")
		st := status.Convert(err)
		assert.Equal(t, codes.ResourceExhausted, st.Code())
		assert.Equal(t, err.Error(), st.Message())
		assert.Len(t, st.Details(), 2, "the refusal's RetryInfo and QuotaFailure")
		assert.ErrorIs(t, err, refusal(ratelimit.Result{Policy: &pacedPolicy, RetryAfter: time.Minute}).err)

		// 5 s before the wait is over, a call with 2 s to its deadline
		// fails at once too, without reaching the server.
		time.Sleep(55 * time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		err = callPaced(ctx, cc)
		require.ErrorAs(t, err, &we)
		assert.Equal(t, 5*time.Second, we.Wait)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Len(t, srv.seen(), 1)
	})
}

func TestClientBoundsHostileHints(t *testing.T) {
	const year = 365 * 24 * time.Hour
	for _, tc := range []struct {
		name   string
		answer func(ctx context.Context) error
		wait   time.Duration // the WaitError's, or 0: no wait, no retry
	}{
		{"RetryInfo of 10 years", func(context.Context) error { return retryInfo(durationpb.New(10 * year)) }, 10 * year},
		{"RetryInfo of 10000 years", func(context.Context) error { return retryInfo(&durationpb.Duration{Seconds: 315_576_000_000}) }, 1<<63 - 1},
		{"negative RetryInfo", func(context.Context) error { return retryInfo(durationpb.New(-5 * time.Second)) }, 0},
		{"invalid RetryInfo", func(context.Context) error { return retryInfo(&durationpb.Duration{Seconds: 1, Nanos: -5}) }, 0},
		{"pushback past int32", func(ctx context.Context) error { return pushbackOnly(ctx, "99999999999") }, 0},
		{"reset of 10 years", func(ctx context.Context) error {
			declareQuota(ctx, 1, 60, 0, int(10*year/time.Second))
			return nil
		}, 10 * year},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cc, srv := startPaced(t, nil, firstOnly(tc.answer))
				start := time.Now()
				_ = callPaced(t.Context(), cc)
				err := callPaced(t.Context(), cc)
				assert.Equal(t, time.Duration(0), time.Since(start), "no wait")
				if tc.wait == 0 {
					assert.NoError(t, err)
					return
				}
				var we *pace.WaitError
				require.ErrorAs(t, err, &we)
				assert.Equal(t, tc.wait, we.Wait)
				assert.Len(t, srv.seen(), 1, "no retry")
			})
		})
	}
}

func TestClientBudgetPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		byKey := &pace.Options{MaxWait: -1, Key: func(r *http.Request) string { return r.URL.Host + " " + r.Header.Get("X-Api-Key") }}
		cc, srv := startPaced(t, byKey, func(ctx context.Context, _ int) error {
			declareQuota(ctx, 1, 60, 0, 60)
			return nil
		})
		as := func(key string) context.Context {
			return metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key)
		}
		require.NoError(t, callPaced(as("a"), cc))
		var we *pace.WaitError
		require.ErrorAs(t, callPaced(as("a"), cc), &we, "a's quota is spent")
		require.NoError(t, callPaced(as("b"), cc))
		assert.Len(t, srv.seen(), 2)
	})
}

// TestClientPacesToDeclaredQuota: calls from many goroutines share the
// declared quota, and once it is spent wait for the refill it declares.
func TestClientPacesToDeclaredQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cc, srv := startPaced(t, nil, windowLimiter(10))
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 10 {
					assert.NoError(t, callPaced(t.Context(), cc))
				}
			})
		}
		wg.Wait()
		seen := srv.seen()
		require.Len(t, seen, 80)
		for i, d := range seen {
			assert.Equal(t, time.Duration(i/10)*time.Second, d, "call %d", i)
		}
	})
}
