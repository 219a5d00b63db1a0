package otellimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/storetest"
)

// TestGRPC: the decisions of grpclimit's interceptors, which run a
// Middleware, are counted as the HTTP ones are.
func TestGRPC(t *testing.T) {
	s := newSDK(t)
	store, err := memorystore.New(&memorystore.Options{Clock: new(storetest.Clock).Now})
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Name: "rpc", Limit: ratelimit.Per(2, time.Minute)})
	require.NoError(t, err)
	srv, err := grpclimit.NewServer(lim, ratelimit.KeyByAPIKey("X-API-Key"), &ratelimit.MiddlewareOptions{Observe: s.m.Observe})
	require.NoError(t, err)
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(srv.UnaryInterceptor()), grpc.ChainStreamInterceptor(srv.StreamInterceptor()))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	lis := bufconn.Listen(1 << 16)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })

	client := healthpb.NewHealthClient(conn)
	var got []codes.Code
	for _, key := range []string{"a", "a", "a", ""} {
		ctx := context.Background()
		if key != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		}
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		got = append(got, status.Code(err))
	}
	assert.Equal(t, []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.Unauthenticated}, got)
	assert.Equal(t, map[string]int64{pr("rpc", "allowed"): 2, pr("rpc", "limited"): 1, pr("rpc", "invalid"): 1}, s.requests(t))
}
