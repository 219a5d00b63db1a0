package main

// The RPC service of the demo, geocoding.v1.Geocoder, and its gRPC server
// of -grpc-addr. The service is written by hand over the protobuf
// well-known types, so that any client calls it without the demo's code:
//
//	service Geocoder {
//	  rpc Geocode(google.protobuf.StringValue) returns (google.protobuf.Struct);
//	  rpc GeocodeStream(stream google.protobuf.StringValue) returns (stream google.protobuf.Struct);
//	}

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/reflection"
	v1reflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1"
	v1alphareflectiongrpc "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/grpclimit"
)

// The names of the service, of its methods as they go on the wire, and of
// the file that declares it (for reflection).
const (
	geocoderName           = "geocoding.v1.Geocoder"
	geocodeProcedure       = "/" + geocoderName + "/Geocode"
	geocodeStreamProcedure = "/" + geocoderName + "/GeocodeStream"
	geocoderFile           = "geocoding/v1/geocoder.proto"
)

// maxRPCMessage is the largest request message, of gRPC and of Connect: a
// place name, with room to spare.
const maxRPCMessage = 16 << 10

// geocodeAnswer returns the answer of Geocode to name: a Struct with the
// place's name, lat and lon. An empty name is a status error of code
// INVALID_ARGUMENT, an unknown place one of NOT_FOUND.
func geocodeAnswer(name string) (*structpb.Struct, error) {
	if strings.TrimSpace(name) == "" {
		return nil, status.Error(codes.InvalidArgument, "the place name is empty")
	}
	p, ok := lookup(name)
	if !ok {
		return nil, status.Error(codes.NotFound, "unknown place")
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"name": structpb.NewStringValue(p.Name),
		"lat":  structpb.NewNumberValue(p.Lat),
		"lon":  structpb.NewNumberValue(p.Lon),
	}}, nil
}

// geocoderServer is the service's handler type, as protoc-gen-go-grpc
// would declare it.
type geocoderServer interface {
	Geocode(context.Context, *wrapperspb.StringValue) (*structpb.Struct, error)
	GeocodeStream(grpc.BidiStreamingServer[wrapperspb.StringValue, structpb.Struct]) error
}

// geocoder serves geocoding.v1.Geocoder. The limits are the interceptors'.
type geocoder struct{}

var _ geocoderServer = geocoder{}

// Geocode answers the place named by name.
func (geocoder) Geocode(_ context.Context, name *wrapperspb.StringValue) (*structpb.Struct, error) {
	return geocodeAnswer(name.GetValue())
}

// GeocodeStream answers each name the stream receives with one message, in
// order, until the client closes its side. An empty or unknown name ends
// the stream with its status, as a refused message does.
func (geocoder) GeocodeStream(stream grpc.BidiStreamingServer[wrapperspb.StringValue, structpb.Struct]) error {
	for {
		name, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		answer, err := geocodeAnswer(name.GetValue())
		if err != nil {
			return err
		}
		if err := stream.Send(answer); err != nil {
			return err
		}
	}
}

// geocoderDesc is the service's grpc.ServiceDesc, as protoc-gen-go-grpc
// would write it.
var geocoderDesc = grpc.ServiceDesc{
	ServiceName: geocoderName,
	HandlerType: (*geocoderServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Geocode",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if interceptor == nil {
				return srv.(geocoderServer).Geocode(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: geocodeProcedure}
			return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return srv.(geocoderServer).Geocode(ctx, req.(*wrapperspb.StringValue))
			})
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName: "GeocodeStream",
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(geocoderServer).GeocodeStream(&grpc.GenericServerStream[wrapperspb.StringValue, structpb.Struct]{ServerStream: stream})
		},
		ServerStreams: true,
		ClientStreams: true,
	}},
	Metadata: geocoderFile,
}

// geocoderDescriptor is the file that declares the service, for
// reflection: the descriptor of geocoderDesc.
func geocoderDescriptor() (protoreflect.FileDescriptor, error) {
	method := func(name string, streaming bool) *descriptorpb.MethodDescriptorProto {
		m := &descriptorpb.MethodDescriptorProto{
			Name:       proto.String(name),
			InputType:  proto.String(".google.protobuf.StringValue"),
			OutputType: proto.String(".google.protobuf.Struct"),
		}
		if streaming {
			m.ClientStreaming, m.ServerStreaming = proto.Bool(true), proto.Bool(true)
		}
		return m
	}
	return protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String(geocoderFile),
		Package:    proto.String("geocoding.v1"),
		Dependency: []string{"google/protobuf/wrappers.proto", "google/protobuf/struct.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name:   proto.String("Geocoder"),
			Method: []*descriptorpb.MethodDescriptorProto{method("Geocode", false), method("GeocodeStream", true)},
		}},
		Syntax: proto.String("proto3"),
	}, protoregistry.GlobalFiles)
}

// descriptors finds the files and symbols of reflection: the service's
// own file, then those linked into the program (the well-known types, the
// reflection service's).
type descriptors struct{ own *protoregistry.Files }

func (d descriptors) FindFileByPath(path string) (protoreflect.FileDescriptor, error) {
	if fd, err := d.own.FindFileByPath(path); err == nil {
		return fd, nil
	}
	return protoregistry.GlobalFiles.FindFileByPath(path)
}

func (d descriptors) FindDescriptorByName(name protoreflect.FullName) (protoreflect.Descriptor, error) {
	if desc, err := d.own.FindDescriptorByName(name); err == nil {
		return desc, nil
	}
	return protoregistry.GlobalFiles.FindDescriptorByName(name)
}

// newGRPCServer returns the server of -grpc-addr: geocoding.v1.Geocoder,
// whose unary calls and stream messages are decided as the HTTP requests
// of /geocode are, with the limiter l, the key function key and the
// options opts of their Middleware, and server reflection (v1 and
// v1alpha), never limited.
func newGRPCServer(l *ratelimit.Limiter, key ratelimit.KeyFunc, opts ratelimit.MiddlewareOptions) (*grpc.Server, error) {
	skip := opts.Skip
	opts.Skip = func(r *http.Request) bool { return isReflection(r.URL.Path) || skip != nil && skip(r) }
	limit, err := grpclimit.NewServer(l, key, &opts)
	if err != nil {
		return nil, err
	}
	fd, err := geocoderDescriptor()
	if err != nil {
		return nil, err
	}
	own := new(protoregistry.Files)
	if err := own.RegisterFile(fd); err != nil {
		return nil, err
	}
	s := grpc.NewServer(
		grpc.ChainUnaryInterceptor(limit.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(limit.StreamInterceptor()),
		grpc.MaxRecvMsgSize(maxRPCMessage),
	)
	s.RegisterService(&geocoderDesc, geocoder{})
	found := reflection.ServerOptions{Services: s, DescriptorResolver: descriptors{own}}
	v1reflectiongrpc.RegisterServerReflectionServer(s, reflection.NewServerV1(found))
	v1alphareflectiongrpc.RegisterServerReflectionServer(s, reflection.NewServer(found))
	return s, nil
}

// isReflection reports whether path is the full method of a server
// reflection call, which is never limited: a client must be able to
// discover the service before it has a key.
func isReflection(path string) bool {
	return strings.HasPrefix(path, "/grpc.reflection.")
}

// stopGRPC stops s gracefully: it takes no new calls, and those in
// progress may finish until ctx is done; then it closes them and returns
// ctx's error. A nil s has nothing to stop.
func stopGRPC(ctx context.Context, s *grpc.Server) error {
	if s == nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		s.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Stop()
		<-done
		return ctx.Err()
	}
}
