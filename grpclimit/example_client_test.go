package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/pace"
)

func ExampleUnaryClientInterceptor() {
	// A server whose daily quota is spent for another hour.
	dial, stop := spentGreeter(time.Hour)
	defer stop()

	conn, err := grpc.NewClient("passthrough:///greeter",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dial),
		grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(&pace.Options{MaxWait: 10 * time.Second})))
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	// The refusal's RetryInfo asks for a wait longer than MaxWait: the
	// call fails at once instead of waiting an hour to retry.
	err = conn.Invoke(context.Background(), "/example.Greeter/Hello", wrapperspb.String("hi"), new(structpb.Struct))
	var we *pace.WaitError
	if errors.As(err, &we) {
		fmt.Printf("%v: a wait of about %v, more than %v\n", status.Code(err), we.Wait.Round(time.Minute), we.Max)
	}
	// Output:
	// ResourceExhausted: a wait of about 1h0m0s, more than 10s
}

// spentGreeter starts a server over bufconn that refuses every call as a
// limiter whose quota is spent for wait refuses it, and returns its dialer
// and what stops it.
func spentGreeter(wait time.Duration) (dial func(context.Context, string) (net.Conn, error), stop func()) {
	refuse := func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		if err := dec(new(wrapperspb.StringValue)); err != nil {
			return nil, err
		}
		st, err := status.New(codes.ResourceExhausted, "daily quota spent").
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	lis := bufconn.Listen(1 << 16)
	s := grpc.NewServer()
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "example.Greeter",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{{MethodName: "Hello", Handler: refuse}},
	}, struct{}{})
	go s.Serve(lis)
	return func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }, s.Stop
}
