package bench

import (
	"context"
	"net"
	"testing"
	"time"

	grpcratelimit "github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// echoService is a unary method that answers its request, with no code
// generated: what the interceptors are measured around.
var echoService = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(context.Context, any) (any, error) { return in, nil }
		if icpt == nil {
			return h(ctx, in)
		}
		return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/bench.Echo/Echo"}, h)
	}}},
}

// xrateLimiter is go-grpc-middleware's ratelimit.Limiter over one
// x/time/rate limiter: one bucket for every call, no key, no details.
type xrateLimiter struct{ l *rate.Limiter }

func (x xrateLimiter) Limit(context.Context) error {
	if !x.l.Allow() {
		return context.DeadlineExceeded // never, at the benchmark's rate
	}
	return nil
}

// BenchmarkGRPC is one unary call over bufconn, through a grpc-go client
// and server: without a limiter, with go-grpc-middleware's interceptor
// around x/time/rate, and with this module's Server keyed by the x-api-key
// metadata (allowed, and refused: a spent limit of one a minute, whose wait is told as a
// pushback).
func BenchmarkGRPC(b *testing.B) {
	many := ratelimit.Per(1_000_000, time.Second).WithBurst(1e12) // every call passes
	for _, bc := range []struct {
		name string
		icpt func(b *testing.B) grpc.UnaryServerInterceptor
		fail bool
	}{
		{"none", nil, false},
		{"go-grpc-middleware", func(*testing.B) grpc.UnaryServerInterceptor {
			return grpcratelimit.UnaryServerInterceptor(xrateLimiter{rate.NewLimiter(rate.Inf, 1)})
		}, false},
		{"tokenfair", func(b *testing.B) grpc.UnaryServerInterceptor { return tokenfairGRPC(b, many) }, false},
		{"tokenfair-refused", func(b *testing.B) grpc.UnaryServerInterceptor {
			return tokenfairGRPC(b, ratelimit.Per(1, time.Minute).WithBurst(1))
		}, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var opts []grpc.ServerOption
			if bc.icpt != nil {
				opts = append(opts, grpc.UnaryInterceptor(bc.icpt(b)))
			}
			srv := grpc.NewServer(opts...)
			srv.RegisterService(&echoService, nil)
			lis := bufconn.Listen(1 << 20)
			go srv.Serve(lis)
			defer srv.Stop()
			conn, err := grpc.NewClient("passthrough:///bufnet",
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "bench-key")
			in, out := wrapperspb.String("paris"), new(wrapperspb.StringValue)
			if bc.fail {
				_ = conn.Invoke(ctx, "/bench.Echo/Echo", in, out) // spends the one token
			}
			b.ReportAllocs()
			failed := 0
			for b.Loop() {
				if err := conn.Invoke(ctx, "/bench.Echo/Echo", in, out); err != nil {
					failed++
				}
			}
			if want := map[bool]int{true: b.N}[bc.fail]; failed != want {
				b.Fatalf("%d of %d calls failed, want %d", failed, b.N, want)
			}
		})
	}
}

// tokenfairGRPC returns this module's unary interceptor, one policy of l
// on a memory store, keyed by the x-api-key metadata.
func tokenfairGRPC(b *testing.B, l ratelimit.Limit) grpc.UnaryServerInterceptor {
	store, err := memorystore.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	lim, err := ratelimit.New(store, ratelimit.Policy{Name: "per-key", Limit: l})
	if err != nil {
		b.Fatal(err)
	}
	s, err := grpclimit.NewServer(lim, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Quiet: true})
	if err != nil {
		b.Fatal(err)
	}
	return s.UnaryInterceptor()
}
