package main

import (
	"context"
	"errors"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit"
)

// rpcRoute is the route of POST /geocoding.v1.Geocoder/Geocode on the HTTP
// port: the unary method Geocode for the Connect, gRPC (over h2c) and
// gRPC-Web protocols, behind its own Middleware, which shares the limiters
// and the key of /geocode but answers a refusal in the caller's protocol
// (grpclimit.OnDeny), before the body is read.
type rpcRoute struct {
	mw *ratelimit.Middleware
	h  http.Handler
}

// newConnectHandler returns connect-go's handler of Geocode, with the
// answers of the gRPC server's.
func newConnectHandler() http.Handler {
	return connect.NewUnaryHandler(geocodeProcedure,
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[structpb.Struct], error) {
			answer, err := geocodeAnswer(req.Msg.GetValue())
			if err != nil {
				st := status.Convert(err)
				// Connect's codes are gRPC's, numbered alike.
				return nil, connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
			}
			return connect.NewResponse(answer), nil
		},
		connect.WithReadMaxBytes(maxRPCMessage),
	)
}
