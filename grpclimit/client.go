package grpclimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tokenfair/ratelimit/pace"
)

// UnaryClientInterceptor paces the unary calls of a grpc.ClientConn to the
// limits its server declares, and retries a RESOURCE_EXHAUSTED after the
// wait the server names, as pace.Transport does for HTTP (opts as there;
// nil: the defaults, a budget per target):
//
//	grpc.NewClient(target, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(nil)))
//
// A call that would wait past Options.MaxWait or its deadline fails at once
// with a RESOURCE_EXHAUSTED error in which errors.As finds a
// *pace.WaitError; otherwise the caller gets its last attempt's error, or
// nil. Use it or grpc-go's retryPolicy, never both. Streams are not paced.
// docs/grpc.md gives its retry rules. It is safe for concurrent use and
// starts no goroutine.
func UnaryClientInterceptor(opts *pace.Options) grpc.UnaryClientInterceptor {
	t := pace.New(invoker{}, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		c := &unaryCall{ctx: ctx, method: method, req: req, reply: reply, cc: cc, invoke: invoke, opts: opts}
		resp, err := t.RoundTrip(c.request())
		if resp != nil {
			resp.Body.Close()
		}
		var we *pace.WaitError
		switch {
		case err == nil, c.err != nil && errors.Is(err, c.err):
			return c.err
		case errors.As(err, &we):
			return &waitError{wait: we, refusal: c.err}
		case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
			return status.FromContextError(err).Err()
		}
		return err
	}
}

// unaryCall is one unary call, which the request carries to invoker.
type unaryCall struct {
	ctx        context.Context
	method     string
	req, reply any
	cc         *grpc.ClientConn
	invoke     grpc.UnaryInvoker
	opts       []grpc.CallOption
	err        error // the last invocation's
}

type unaryCallKey struct{}

// request returns the request that stands for c in pace.
func (c *unaryCall) request() *http.Request {
	target := ""
	if c.cc != nil {
		target = c.cc.Target()
	}
	h := make(http.Header)
	md, _ := metadata.FromOutgoingContext(c.ctx)
	for k, v := range md {
		ck := textproto.CanonicalMIMEHeaderKey(k)
		h[ck] = append(h[ck], v...)
	}
	if h.Get("Idempotency-Key") == "" {
		// pace repeats only the requests it takes to be idempotent, and
		// only a refusal, which the handler never saw, is answered as
		// one to retry.
		h.Set("Idempotency-Key", "grpclimit")
	}
	r := &http.Request{
		Method:  http.MethodPost,
		URL:     &url.URL{Scheme: "grpc", Host: target, Path: c.method},
		Host:    target,
		Header:  h,
		Body:    http.NoBody,
		GetBody: func() (io.ReadCloser, error) { return http.NoBody, nil },
	}
	return r.WithContext(context.WithValue(c.ctx, unaryCallKey{}, c))
}

// invoker is the base transport of the pace.Transport: it makes the call a
// request stands for, and answers as an HTTP server would have.
type invoker struct{}

func (invoker) RoundTrip(r *http.Request) (*http.Response, error) {
	c, ok := r.Context().Value(unaryCallKey{}).(*unaryCall)
	if !ok {
		return nil, errors.New("grpclimit: a request that stands for no call")
	}
	var hdr, tlr metadata.MD
	opts := append(c.opts[:len(c.opts):len(c.opts)], grpc.Header(&hdr), grpc.Trailer(&tlr))
	c.err = c.invoke(c.ctx, c.method, c.req, c.reply, c.cc, opts...)
	h := limitFields(hdr, tlr)
	code := http.StatusOK
	if c.err != nil {
		st := status.Convert(c.err)
		d, hinted, stop := retryHint(st, tlr)
		switch {
		case st.Code() == codes.ResourceExhausted && (hinted || stop):
			code = http.StatusTooManyRequests
			if hinted && !stop {
				h.Set("Retry-After", seconds(d))
			}
		case len(h) == 0:
			return nil, c.err // nothing to learn from: pace passes it on
		}
	}
	return &http.Response{
		Status: strconv.Itoa(code) + " " + http.StatusText(code), StatusCode: code,
		Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: h, Body: http.NoBody, Request: r,
	}, nil
}

// limitFields returns the rate-limit metadata of hdr, else tlr, as header
// fields: the metadata of a name in hdr hide those of the same name in
// tlr, which a trailers-only answer may repeat.
func limitFields(hdr, tlr metadata.MD) http.Header {
	h := make(http.Header)
	for _, md := range [2]metadata.MD{hdr, tlr} {
		for k, v := range md {
			if !strings.HasPrefix(k, "ratelimit") && !strings.HasPrefix(k, "x-ratelimit") {
				continue
			}
			if ck := textproto.CanonicalMIMEHeaderKey(k); h[ck] == nil {
				h[ck] = v
			}
		}
	}
	return h
}

// retryHint returns the wait before another call that st, a call's
// status, and tlr, its trailer metadata, ask for: the longer of its
// RetryInfo's delay and its grpc-retry-pushback-ms; whether either asks
// for one; and whether the pushback is negative (do not retry). A RetryInfo
// without a delay, or with a negative or invalid one, is ignored, as is a
// pushback that is not one 32-bit integer.
func retryHint(st *status.Status, tlr metadata.MD) (d time.Duration, hinted, stop bool) {
	for _, x := range st.Details() {
		ri, ok := x.(*errdetails.RetryInfo)
		if !ok || ri.GetRetryDelay() == nil || ri.GetRetryDelay().CheckValid() != nil {
			continue
		}
		if v := ri.GetRetryDelay().AsDuration(); v >= 0 && (!hinted || v > d) {
			d, hinted = v, true // AsDuration saturates
		}
	}
	if v := tlr[pushbackKey]; len(v) == 1 {
		if ms, err := strconv.ParseInt(v[0], 10, 32); err == nil {
			if p := time.Duration(ms) * time.Millisecond; ms < 0 {
				stop = true
			} else if !hinted || p > d {
				d, hinted = p, true
			}
		}
	}
	return d, hinted, stop
}

// seconds returns d, not negative, in Retry-After's delay-seconds, rounded
// up so that the wait is never shorter than the server asked.
func seconds(d time.Duration) string {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return strconv.FormatInt(s, 10)
}

// waitError is the error of a call that would have to wait longer than it
// may: RESOURCE_EXHAUSTED, with the details of the refusal it did not
// retry, if one; errors.As finds the *pace.WaitError, and errors.Is the
// refusal.
type waitError struct {
	wait    *pace.WaitError
	refusal error
}

func (e *waitError) Error() string { return "grpclimit: " + e.wait.Error() }

func (e *waitError) Unwrap() []error {
	if e.refusal == nil {
		return []error{e.wait}
	}
	return []error{e.wait, e.refusal}
}

// GRPCStatus returns RESOURCE_EXHAUSTED with Error as its message, and the
// details of the refusal, if one.
func (e *waitError) GRPCStatus() *status.Status {
	p := status.New(codes.ResourceExhausted, e.Error()).Proto()
	if st, ok := status.FromError(e.refusal); ok && e.refusal != nil && st.Code() == codes.ResourceExhausted {
		p.Details = st.Proto().GetDetails()
	}
	return status.FromProto(p)
}
