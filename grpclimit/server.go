package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/fieldname"
)

// Server limits the calls of a grpc.Server with a ratelimit.Middleware:
// each unary call, and each message a stream receives, is decided as the
// HTTP request made of it would be (see [NewServer]), so one Limiter holds
// one quota per key across HTTP and gRPC. A refusal is RESOURCE_EXHAUSTED,
// a call that cannot be decided a gRPC code with a fixed message (never
// the error's text), and a refused stream message ends its stream;
// ratelimit.ResultFrom and ratelimit.Settle work in unary calls only.
// docs/grpc.md lists the codes and the stream rules. A Server is safe for
// concurrent use.
type Server struct {
	m *ratelimit.Middleware
}

// NewServer returns a Server that limits calls with l, keyed by key and
// configured by opts as a Middleware is (nil: the defaults). key and the
// options see a request made of each call (a POST to the full method, the
// metadata as Header, the peer as RemoteAddr), and CountIf the HTTP status
// of the handler's code; docs/grpc.md lists both. It returns an error
// naming the value at fault; opts.OnDeny and opts.OnError must be nil: a
// Server answers in gRPC codes.
func NewServer(l *ratelimit.Limiter, key ratelimit.KeyFunc, opts *ratelimit.MiddlewareOptions) (*Server, error) {
	var o ratelimit.MiddlewareOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.OnDeny != nil:
		return nil, errors.New("grpclimit: NewServer: MiddlewareOptions.OnDeny is set, but a Server answers refusals with a gRPC status of its own: leave it nil")
	case o.OnError != nil:
		return nil, errors.New("grpclimit: NewServer: MiddlewareOptions.OnError is set, but a Server answers errors with gRPC status codes of its own: leave it nil")
	}
	o.OnDeny, o.OnError = keepRefusal, keepError
	m, err := ratelimit.NewMiddleware(l, key, &o)
	if err != nil {
		return nil, fmt.Errorf("grpclimit: NewServer: %w", err)
	}
	return &Server{m: m}, nil
}

// UnaryInterceptor returns the interceptor that limits the unary calls of
// a grpc.Server; chain it before any that sets header metadata, or
// grpc-go's retry policy will not retry its refusals:
// grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryInterceptor())).
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor { return s.unary }

// StreamInterceptor returns the interceptor that limits the messages the
// streams of a grpc.Server receive:
// grpc.NewServer(grpc.ChainStreamInterceptor(s.StreamInterceptor())).
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor { return s.stream }

func (s *Server) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	var (
		resp     any
		err      error
		admitted bool
	)
	c := new(call)
	s.m.Handle(&c.answer, c.request(ctx, info.FullMethod, req), func(r *http.Request) (int, int64) {
		admitted = true
		if md := c.metadata(); md != nil {
			_ = grpc.SetHeader(ctx, md) // merged with the handler's; it fails only once headers are sent
		}
		resp, err = handler(r.Context(), req)
		return httpStatus(err), sizeOf(resp, err)
	})
	if admitted {
		return resp, err
	}
	md, err := c.ending()
	_ = grpc.SetTrailer(ctx, md)
	return nil, err
}

func (s *Server) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ms := &meteredStream{ServerStream: ss, m: s.m, method: info.FullMethod}
	err := handler(srv, ms)
	if ms.trailer != nil {
		ss.SetTrailer(ms.trailer)
	}
	if ms.ended != nil {
		return ms.ended
	}
	return err
}

// meteredStream is a stream whose received messages a Middleware decides.
// Its fields are used by the goroutine that receives, and after the
// handler has returned.
type meteredStream struct {
	grpc.ServerStream
	m       *ratelimit.Middleware
	method  string
	ended   error       // the refusal or error that ended the stream
	trailer metadata.MD // the last decision's metadata
	headed  bool        // the first decision's metadata was set in the headers
}

// RecvMsg receives the next message and returns once the Middleware
// admits it, or the refusal that ends the stream.
func (ms *meteredStream) RecvMsg(msg any) error {
	if ms.ended != nil {
		return ms.ended
	}
	if err := ms.ServerStream.RecvMsg(msg); err != nil {
		return err
	}
	c := new(call)
	admitted := false
	ms.m.Handle(&c.answer, c.request(ms.Context(), ms.method, msg), func(*http.Request) (int, int64) {
		admitted = true
		return http.StatusOK, 0
	})
	if !admitted {
		ms.trailer, ms.ended = c.ending()
		return ms.ended
	}
	if md := c.metadata(); md != nil {
		if !ms.headed {
			ms.headed = ms.ServerStream.SetHeader(md) == nil
		}
		ms.trailer = md
	}
	return nil
}

// sizeOf returns the bytes of the answer resp of a unary handler that
// returned err, which a policy of "content-bytes" is charged: the size of
// the message in the wire format, 0 for an error or a message that is not
// a protobuf one.
func sizeOf(resp any, err error) int64 {
	if m, ok := resp.(proto.Message); ok && err == nil {
		return int64(proto.Size(m))
	}
	return 0
}

// messageKey is the context key of the message that Message returns.
type messageKey struct{}

// Message returns the request message being decided, from the context
// that the Middleware's key functions, Cost, Costs, Skip and LimiterFor
// receive (or an admitted unary call's handler); nil otherwise.
func Message(ctx context.Context) any { return ctx.Value(messageKey{}) }

// call is one decision: the request made of a unary call or of a stream
// message, the answer the Middleware gives it, and the context of the
// request, the call's with the message for Message, in one allocation.
type call struct {
	context.Context // the call's
	msg             any
	answer
	url url.URL
}

// Value returns the message for messageKey{}, else the call context's
// value for key.
func (c *call) Value(key any) any {
	if key == (messageKey{}) {
		return c.msg
	}
	return c.Context.Value(key)
}

// request returns the HTTP request made of a call of method whose message
// msg is being decided, in ctx, the call's context (see NewServer).
func (c *call) request(ctx context.Context, method string, msg any) *http.Request {
	// The incoming metadata, copied: it becomes the request's Header, each
	// name canonicalised in place (a name met again is canonical already).
	md, _ := metadata.FromIncomingContext(ctx)
	h := http.Header(md)
	for k, v := range md {
		if ck := canonicalKey(k); ck != k {
			delete(h, k)
			h[ck] = v
		}
	}
	c.Context, c.msg = ctx, msg
	c.url.Path = method
	r := (&http.Request{
		Method:        http.MethodPost,
		URL:           &c.url,
		RequestURI:    method,
		Proto:         "HTTP/2.0",
		ProtoMajor:    2,
		Header:        h,
		Body:          http.NoBody,
		ContentLength: -1,
	}).WithContext(c)
	if a := h[":authority"]; len(a) == 1 {
		r.Host = a[0]
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		r.RemoteAddr = p.Addr.String()
	}
	return r
}

// canonicalKey returns http.CanonicalHeaderKey(k) of a metadata key k,
// without allocating for the usual ones.
func canonicalKey(k string) string {
	switch k {
	case "x-api-key":
		return "X-Api-Key"
	case "authorization":
		return "Authorization"
	case "x-forwarded-for":
		return "X-Forwarded-For"
	case "user-agent":
		return "User-Agent"
	case "content-type":
		return "Content-Type"
	case "grpc-accept-encoding":
		return "Grpc-Accept-Encoding"
	case "grpc-timeout":
		return "Grpc-Timeout"
	case "te":
		return "Te"
	}
	return http.CanonicalHeaderKey(k)
}

// httpStatus returns the HTTP status that MiddlewareOptions.CountIf sees
// of a unary handler that returned err (see NewServer).
func httpStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err) // as grpc-go answers such an error
	}
	return statusOfCode(st.Code())
}

// statusOfCode returns the HTTP status of the gRPC code c (see NewServer),
// which is also the status of a Connect unary error of c.
func statusOfCode(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Canceled:
		return 499 // nginx's Client Closed Request, as grpc-gateway maps it
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// answer is the http.ResponseWriter of one decision: it keeps the header
// fields the Middleware sets and what it answered, when the call may not
// proceed, for status to tell in gRPC terms. Bodies are dropped.
type answer struct {
	header  http.Header
	code    int // of the answer the Middleware wrote itself (403 for Block)
	denied  bool
	refused ratelimit.Result // OnDeny's, if denied
	err     error            // OnError's
}

func (a *answer) Header() http.Header {
	if a.header == nil {
		a.header = make(http.Header, 4)
	}
	return a.header
}

func (a *answer) WriteHeader(code int) {
	if a.code == 0 {
		a.code = code
	}
}

func (a *answer) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	return len(b), nil
}

// keepRefusal is the Server's MiddlewareOptions.OnDeny: it keeps the refusal.
func keepRefusal(w http.ResponseWriter, _ *http.Request, res ratelimit.Result) {
	if a, ok := w.(*answer); ok {
		a.denied, a.refused = true, res
	}
}

// keepError is the Server's MiddlewareOptions.OnError: it keeps the error.
func keepError(w http.ResponseWriter, _ *http.Request, err error) {
	if a, ok := w.(*answer); ok {
		a.err = err
	}
}

// pushbackKey is the metadata name of grpc-go's retry pushback.
const pushbackKey = "grpc-retry-pushback-ms"

// metadata turns the header that the Middleware set into metadata, and
// returns it: the rate-limit fields, their names in lower case, and
// nothing else; nil when there are none. Call it once, when the Middleware
// has set every field.
func (a *answer) metadata() metadata.MD {
	md := metadata.MD(a.header)
	a.header = nil
	for k, v := range md {
		name := ""
		for _, f := range fieldname.All {
			if k == f.Draft || k == f.Canonical || k == f.Metadata {
				name = f.Metadata
				break
			}
		}
		if name != k { // a name met again, in lower case, is kept
			delete(md, k)
			if name != "" {
				md[name] = v
			}
		}
	}
	if len(md) == 0 {
		return nil
	}
	return md
}

// ending returns the trailer and the error that end the call a answered
// without running it: the rate-limit metadata, and for a refusal or an
// unavailable store the pushback.
func (a *answer) ending() (metadata.MD, error) {
	var err error
	var retry []string // the pushback, if any
	switch {
	case a.denied:
		rf := refusal(a.refused) // shared: its error and pushback are made once
		err, retry = rf.err, rf.pushback
	case a.err != nil:
		st := failure(a.err)
		if st.Code() == codes.Unavailable {
			retry = []string{pushback(time.Second)} // unavailable's RetryInfo
		}
		err = st.Err()
	case a.code == http.StatusForbidden:
		err = status.Error(codes.PermissionDenied, "ratelimit: the client's address is blocked")
	default:
		err = status.Error(codes.Internal, "ratelimit: the call could not be limited")
	}
	md := a.metadata()
	if retry != nil {
		if md == nil {
			md = make(metadata.MD, 1)
		}
		md[pushbackKey] = retry
	}
	return md, err
}
