package pace

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tokenfair/ratelimit"
)

// Options configures a [Transport]. A nil *Options, like the zero Options,
// gives every field its default.
type Options struct {
	// MaxWait is the longest a request may be held, in all its waits (for
	// a refill, a Retry-After, its own limit's turn) together; a request
	// that would wait longer fails at once with a *WaitError. Default: 1
	// minute; negative: no wait at all.
	MaxWait time.Duration
	// MaxRetries is how many times a request answered 429 or 503 with
	// Retry-After is sent again, once that wait is over, if it can be
	// repeated (see Transport). Default: 2; negative: never.
	MaxRetries int
	// Key names the budget a request draws on: requests with the same key
	// share what the server declares, and Limit. An empty key fails the
	// request. Default: the request's scheme://host[:port], lower case,
	// without the scheme's default port.
	Key func(*http.Request) string
	// Limit is a limit of the client's own on top of what servers declare,
	// per Key, such as a provider's published "1 request a second":
	// requests beyond its burst take their turns in order. An invalid
	// Limit fails every request with an error naming it. Default: the
	// zero Limit, none.
	Limit ratelimit.Limit
}

// Defaults of Options.
const (
	defaultMaxWait    = time.Minute
	defaultMaxRetries = 2
)

// Transport is an [http.RoundTripper] that paces requests to the rate
// limits servers declare, and retries the requests they refuse for a
// while, never waiting longer than allowed.
//
// Per budget (Options.Key: a server by default), it keeps what the newest
// answer declared is left of the quota that binds the requests ([Read]),
// less the requests in flight; once that is spent, a request waits until
// the server said more comes. A quota in another unit, such as
// content-bytes, holds requests only once it is spent. Without such fields
// requests go freely. A 429 or 503 with Retry-After holds every
// request of its budget until then, and is retried after that wait, up to
// Options.MaxRetries times, if the request can be repeated: its method is
// GET, HEAD, OPTIONS, TRACE, PUT or DELETE, or it carries an
// Idempotency-Key, and it has no body or a GetBody. A wait longer than
// Options.MaxWait, or past the request's deadline, fails at once with a
// [*WaitError]; the end of the request's context ends every wait. It
// keeps 1024 budgets at most, forgetting first the one unused the longest
// that holds no request back; docs/client.md says what it does when every
// one does, and more.
//
// A Transport is safe for concurrent use and starts no goroutine. Make
// one with [New].
type Transport struct {
	base       http.RoundTripper
	maxWait    time.Duration
	maxRetries int
	key        func(*http.Request) string
	own        *own
	err        error // an invalid Options.Limit
	budgets    budgets
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport that sends requests through base, nil meaning
// http.DefaultTransport, configured by opts.
func New(base http.RoundTripper, opts *Options) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	if opts == nil {
		opts = &Options{}
	}
	t := &Transport{base: base, maxWait: opts.MaxWait, maxRetries: opts.MaxRetries, key: opts.Key}
	switch {
	case t.maxWait == 0:
		t.maxWait = defaultMaxWait
	case t.maxWait < 0:
		t.maxWait = 0
	}
	switch {
	case t.maxRetries == 0:
		t.maxRetries = defaultMaxRetries
	case t.maxRetries < 0:
		t.maxRetries = 0
	}
	if t.key == nil {
		t.key = serverKey
	}
	if opts.Limit != (ratelimit.Limit{}) {
		t.own, t.err = newOwn(opts.Limit, t.maxWait)
	}
	return t
}

// RoundTrip sends req when its budget allows, and again when it is
// refused for a while and can be repeated; see [Transport].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.err != nil {
		closeBody(req)
		return nil, t.err
	}
	key := t.key(req)
	if key == "" {
		closeBody(req)
		return nil, fmt.Errorf("pace: Options.Key returned an empty key for a request to %s", req.URL.Host)
	}
	b := t.budgets.get(key, time.Now())
	defer func() { t.budgets.put(b, time.Now()) }()
	w := &waiter{ctx: req.Context(), left: t.maxWait}
	retry := t.maxRetries > 0 && repeatable(req)
	r := req
	for tries := 0; ; tries++ {
		turn, err := t.hold(w, b, key, r.URL.Host)
		if err != nil {
			closeBody(r)
			return nil, err
		}
		resp, err := t.base.RoundTrip(r)
		now := time.Now()
		if err != nil {
			b.settle(turn, r.URL.Host, 0, nil, now)
			return nil, err
		}
		b.settle(turn, r.URL.Host, resp.StatusCode, resp.Header, now)
		if !retry || tries == t.maxRetries || !retried(resp, now) {
			return resp, nil
		}
		next, err := rewind(req)
		if err != nil {
			return resp, nil // the caller gets the answer it cannot have again
		}
		resp.Body.Close() // unread: a server may stall it, for longer than any wait
		r = next
	}
}

// hold waits until req may go: its own limit's turn, then its budget's.
func (t *Transport) hold(w *waiter, b *budget, key, host string) (turn, error) {
	var took ratelimit.Result
	if t.own != nil {
		var err error
		if took, err = t.own.wait(w, key); err != nil {
			return turn{}, err
		}
	}
	for {
		tn, h, ok := b.take(time.Now())
		if ok {
			return tn, nil
		}
		var e *WaitError
		var err error
		if h.d >= 0 {
			if e = w.check(h.d); e == nil {
				_, err = w.wait(h.d, h.wake)
			}
		} else {
			e, err = w.waitAnswer(h.wake)
		}
		if e != nil {
			e.Cause = h.cause(host)
			err = e
		}
		if err != nil {
			if t.own != nil {
				t.own.giveBack(w.ctx, key, took)
			}
			return turn{}, err
		}
	}
}

// CloseIdleConnections closes the idle connections of the base transport,
// when it has such a method, as http.Client.CloseIdleConnections expects.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// serverKey is the default Options.Key: scheme://host[:port].
func serverKey(r *http.Request) string {
	scheme, host := strings.ToLower(r.URL.Scheme), strings.ToLower(r.URL.Host)
	switch {
	case scheme == "http":
		host = strings.TrimSuffix(host, ":80")
	case scheme == "https":
		host = strings.TrimSuffix(host, ":443")
	}
	return scheme + "://" + host
}

// repeatable reports whether req may be sent again: a safe or idempotent
// method, or an Idempotency-Key, and a body that GetBody makes again.
func repeatable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return req.Header.Get("Idempotency-Key") != ""
}

// retried reports whether resp, received at now, asks for the request
// again later: a 429 or 503 with Retry-After.
func retried(resp *http.Response, now time.Time) bool {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return false
	}
	_, ok := RetryAfter(resp.Header, now)
	return ok
}

// rewind returns req to send again, with its body made again by GetBody.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	if body == nil {
		return nil, errors.New("pace: GetBody returned no body")
	}
	r := new(http.Request)
	*r = *req
	r.Body = body
	return r, nil
}

// closeBody closes the body of a request that is not sent, as a
// RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
