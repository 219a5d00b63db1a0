package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

// Two calls a minute per API key, read from the metadata x-api-key, on a
// grpc.Server: the third call is refused with RESOURCE_EXHAUSTED, a
// RetryInfo and the pushback that grpc-go's retry policy waits.
func ExampleNewServer() {
	// A clock that stands still, for the example's output; leave Clock
	// out in a real server.
	noon := func() time.Time { return time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC) }
	store, _ := memorystore.New(&memorystore.Options{Clock: noon})
	limiter, _ := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.Per(2, time.Minute)})
	limits, err := grpclimit.NewServer(limiter, ratelimit.KeyByAPIKey("X-API-Key"), nil)
	if err != nil {
		panic(err)
	}

	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limits.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(limits.StreamInterceptor()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis := bufconn.Listen(1 << 16) // in memory; a net.Listener in a real server
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "demo")
	for range 3 {
		var header, trailer metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		if err == nil {
			fmt.Println("OK", header.Get("ratelimit"))
			continue
		}
		st := status.Convert(err)
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println(st.Code(), "retry in", ri.GetRetryDelay().AsDuration(), "pushback", trailer.Get("grpc-retry-pushback-ms"))
			}
		}
	}
	// Output:
	// OK ["default";r=1;t=30]
	// OK ["default";r=0;t=30]
	// ResourceExhausted retry in 30s pushback [30000]
}
