package grpclimit

// How the HTTP middleware answers an RPC that it refuses or cannot
// decide: in the caller's protocol, Connect, gRPC or gRPC-Web, from the
// request's header alone.

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tokenfair/ratelimit"
)

// OnDeny answers a refused RPC, for the MiddlewareOptions.OnDeny of a
// Middleware in front of Connect, gRPC or gRPC-Web handlers, with any
// adapter: RESOURCE_EXHAUSTED, with a RetryInfo and a QuotaFailure, in the
// caller's protocol as its Content-Type says (Connect if none), keeping the
// Middleware's rate-limit fields; it never reads the request's body.
// docs/grpc.md shows each protocol's answer. With OnError:
//
//	&ratelimit.MiddlewareOptions{OnDeny: grpclimit.OnDeny, OnError: grpclimit.OnError}
func OnDeny(w http.ResponseWriter, r *http.Request, res ratelimit.Result) {
	rf := refusal(res)
	writeStatus(w, r, rf.st, rf.pushback[0])
}

// OnError answers as OnDeny does an RPC that could not be decided, for
// MiddlewareOptions.OnError, with a fixed message, never the error's text:
// ErrMissingKey is unauthenticated, ErrBadRequest invalid_argument,
// ErrStore and an abandoned wait (context.Canceled) unavailable with a
// RetryInfo of a second, and any other error internal.
func OnError(w http.ResponseWriter, r *http.Request, err error) {
	st, retry := failure(err), ""
	if st.Code() == codes.Unavailable {
		w.Header().Set("Retry-After", "1")
		retry = pushback(time.Second)
	}
	writeStatus(w, r, st, retry)
}

// writeStatus answers r with st, and the pushback retry unless it is "",
// in the protocol of r.
func writeStatus(w http.ResponseWriter, r *http.Request, st *status.Status, retry string) {
	h := w.Header()
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		// net/http reads up to 256 KiB of an unread HTTP/1.x body before
		// it sends the answer, unless the connection is to be closed.
		h.Set("Connection", "close")
	}
	kind, contentType := protocolOf(r)
	switch kind {
	case grpcProtocol:
		h.Set("Content-Type", contentType)
		writeTrailersOnly(h, st, retry)
		w.WriteHeader(http.StatusOK) // and no body: headers that end the stream
	case connectStream:
		b, _ := json.Marshal(endStream{Error: wireErrorOf(st)})
		msg := make([]byte, 5, 5+len(b))
		msg[0] = endStreamFlag
		binary.BigEndian.PutUint32(msg[1:], uint32(len(b)))
		msg = append(msg, b...)
		h.Set("Content-Type", contentType)
		h.Set("Content-Length", strconv.Itoa(len(msg)))
		w.WriteHeader(http.StatusOK)
		w.Write(msg)
	default:
		b, _ := json.Marshal(wireErrorOf(st))
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(statusOfCode(st.Code()))
		w.Write(b)
	}
}

// protocol is the RPC protocol of a request.
type protocol uint8

const (
	connectUnary  protocol = iota // and any request in no RPC protocol
	connectStream                 // a Connect streaming call
	grpcProtocol                  // gRPC, and gRPC-Web, whose trailers-only answer is the same
)

// protocolOf returns the protocol of r and its media type, lower case,
// without parameters, as connect-go tells them: application/grpc[+codec]
// and application/grpc-web[-text][+codec] are gRPC's,
// application/connect+codec is Connect streaming, and the rest Connect
// unary.
func protocolOf(r *http.Request) (protocol, string) {
	ct := r.Header.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.ToLower(strings.TrimSpace(ct))
	rest, ok := strings.CutPrefix(ct, "application/")
	switch {
	case !ok:
		return connectUnary, ct
	case isGRPC(rest, "grpc"), isGRPC(rest, "grpc-web"), isGRPC(rest, "grpc-web-text"):
		return grpcProtocol, ct
	case strings.HasPrefix(rest, "connect+"):
		return connectStream, ct
	}
	return connectUnary, ct
}

// isGRPC reports whether subtype is base or base+codec.
func isGRPC(subtype, base string) bool {
	rest, ok := strings.CutPrefix(subtype, base)
	return ok && (rest == "" || rest[0] == '+')
}

// writeTrailersOnly sets the header fields of a trailers-only gRPC answer
// of st, with the pushback retry unless it is "".
func writeTrailersOnly(h http.Header, st *status.Status, retry string) {
	h.Set("Grpc-Status", strconv.Itoa(int(st.Code())))
	h.Set("Grpc-Message", percentEncode(st.Message()))
	if len(st.Details()) > 0 {
		if b, err := proto.Marshal(st.Proto()); err == nil {
			h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(b))
		}
	}
	if retry != "" {
		h.Set("Grpc-Retry-Pushback-Ms", retry)
	}
}

// percentEncode escapes msg for grpc-message: the bytes outside printable
// ASCII, and '%', as %XX.
func percentEncode(msg string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= ' ' && c <= '~' && c != '%' {
			if b != nil {
				b = append(b, c)
			}
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(msg)+16), msg[:i]...)
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	if b == nil {
		return msg
	}
	return string(b)
}

// endStreamFlag marks the end-of-stream message of a Connect stream.
const endStreamFlag = 0x02

// endStream is the end-of-stream message of a Connect stream.
type endStream struct {
	Error *wireError `json:"error"`
}

// wireError is a Connect error as JSON.
type wireError struct {
	Code    string       `json:"code"`
	Message string       `json:"message,omitempty"`
	Details []wireDetail `json:"details,omitempty"`
}

// wireDetail is a detail of a Connect error: the detail's message type,
// without type.googleapis.com/, and its binary form in base64, unpadded.
type wireDetail struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// wireErrorOf returns st as a Connect error.
func wireErrorOf(st *status.Status) *wireError {
	e := &wireError{Code: connectCode(st.Code()), Message: st.Message()}
	for _, d := range st.Proto().GetDetails() {
		url := d.GetTypeUrl()
		e.Details = append(e.Details, wireDetail{
			Type:  url[strings.LastIndexByte(url, '/')+1:],
			Value: base64.RawStdEncoding.EncodeToString(d.GetValue()),
		})
	}
	return e
}

// connectCode returns the Connect name of the codes this file answers.
func connectCode(c codes.Code) string {
	switch c {
	case codes.ResourceExhausted:
		return "resource_exhausted"
	case codes.Unavailable:
		return "unavailable"
	case codes.Unauthenticated:
		return "unauthenticated"
	case codes.InvalidArgument:
		return "invalid_argument"
	}
	return "internal"
}
