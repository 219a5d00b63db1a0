// Package otellimit exports the decisions of a ratelimit.Middleware, and
// the health of its store, as OpenTelemetry metrics, and marks each
// request's span with its decision. It is fed by the hooks that the
// Prometheus module (package metrics) uses and counts what it counts:
// Observe is a ratelimit.MiddlewareOptions.Observe function, so it works
// wherever a Middleware decides (net/http through nethttp, Gin through
// ginlimit, Echo through echolimit, gRPC through grpclimit.NewServer), and
// OnError and OnHealthChange are failover.Options's hooks.
//
// The instruments, of the meter named by this package's import path, follow
// the shapes of ASP.NET Core's aspnetcore.rate_limiting.* where it has one:
//
//	rate_limiting.requests               counter {request}: rate_limiting.policy, rate_limiting.result
//	rate_limiting.near_limit_requests    counter {request}: rate_limiting.policy; allowed decisions that left few tokens
//	rate_limiting.request.time_in_queue  histogram s: the wait of the requests that a shaping policy queued
//	rate_limiting.queued_requests        up-down counter {request}: requests waiting in shaping queues
//	rate_limiting.active_requests        up-down counter {request}: requests holding an in-flight slot
//	rate_limiting.store.duration         histogram s: the time a decision took, store round trips included
//	rate_limiting.store.errors           counter {error}: errors of a failover.Store's primary store
//	rate_limiting.store.degraded         gauge 1: 1 while a failover.Store's primary store fails, else 0
//
// A decision is counted in rate_limiting.requests once per policy of the
// limiter that decided, with rate_limiting.result the outcome that package
// metrics names in its outcome label: allowed; limited, refused by the
// policy (by its local share too, below); banned, refused by its penalty
// box; dry_run_limited, what a dry-run policy would have refused;
// fallback, allowed unchecked by a failover.Store while its store failed
// (Open mode: the fail-open decisions); local, allowed by a
// failover.Store's Local mode while its store failed, within this
// instance's share; and, with no decision, store_error (the store failed)
// and invalid (no key, a bad cost). A MaxInFlight refusal is counted once, as limited by
// the policy "inflight", and a ban's once, as banned by the punished
// policy. queued_requests and active_requests are read, at each
// collection, from the limiters that Observe has seen (the first 64).
//
// When the request's span (trace.SpanFromContext of its context) is
// recording, Observe sets on it rate_limiting.policy and
// rate_limiting.result: the binding policy and the request's own outcome
// (a refusal's; else dry_run_limited if a policy had it, or else fallback
// or local; else allowed); an undecided request has only the result. A
// refusal also adds the span event rate_limiting.refused, with those
// attributes and rate_limiting.retry_after, in seconds.
//
// No attribute ever carries a client's key, nor its hash. With the SDK's
// meter provider and a span that is not recording, an allowed request is
// counted without allocating.
package otellimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/occupancy"
	"github.com/tokenfair/ratelimit/internal/outcome"
)

// scope is the name of the meter: the instrumenting package's import path.
const scope = "github.com/tokenfair/ratelimit/otellimit"

// Attribute keys.
const (
	policyKey     = attribute.Key("rate_limiting.policy")
	resultKey     = attribute.Key("rate_limiting.result")
	retryAfterKey = attribute.Key("rate_limiting.retry_after")
)

// inFlightPolicy is the name of the policy that a refusal by
// ratelimit.MiddlewareOptions.MaxInFlight reports.
const inFlightPolicy = "inflight"

// maxLimiters bounds the limiters whose attribute sets and occupancy a
// Metrics keeps, in case a LimiterFor makes new ones as it goes; the
// decisions of the others are counted all the same, at a few allocations.
const maxLimiters = 64

// Metrics counts the decisions of Middlewares, and the health of their
// stores, in OpenTelemetry instruments. It is safe for concurrent use.
type Metrics struct {
	requests  metric.Int64Counter
	nearLimit metric.Int64Counter
	inQueue   metric.Float64Histogram
	queued    metric.Int64ObservableUpDownCounter
	active    metric.Int64ObservableUpDownCounter
	duration  metric.Float64Histogram
	errors    metric.Int64Counter
	degraded  metric.Int64Gauge

	inFlightLimited []metric.AddOption // "inflight", limited

	first    atomic.Pointer[limiterAttrs] // the first limiter seen: most programs have one
	limiters sync.Map                     // *ratelimit.Limiter → *limiterAttrs
	nSeen    atomic.Int32                 // entries in limiters, at most maxLimiters

	nearFraction atomic.Uint64 // of SetNearLimit, in 1e-18ths
}

// limiterAttrs are the precomputed attribute sets of one limiter's
// policies, and its occupancy.
type limiterAttrs struct {
	lim      *ratelimit.Limiter
	occ      *occupancy.Counts
	requests [][outcome.N][]metric.AddOption // of each policy, of each result
	near     [][]metric.AddOption            // of each policy
}

// New returns Metrics whose instruments come from mp's meter named
// "github.com/tokenfair/ratelimit/otellimit"; a nil mp means
// otel.GetMeterProvider(). Call it once per meter provider: a second
// Metrics would report the same occupancy twice. It returns an error
// naming the instrument that mp refuses.
func New(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(scope)
	m := &Metrics{inFlightLimited: addOptions(inFlightPolicy, outcome.Limited)}
	m.nearFraction.Store(outcome.DefaultNear)
	var errs []error
	check := func(name string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("otellimit: New: %s: %w", name, err))
		}
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		check(name, err)
		return c
	}
	histogram := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(bounds...))
		check(name, err)
		return h
	}
	upDown := func(name, desc string) metric.Int64ObservableUpDownCounter {
		c, err := meter.Int64ObservableUpDownCounter(name, metric.WithUnit("{request}"), metric.WithDescription(desc))
		check(name, err)
		return c
	}
	m.requests = counter("rate_limiting.requests", "{request}", "Rate-limit decisions, by policy and result.")
	m.nearLimit = counter("rate_limiting.near_limit_requests", "{request}",
		"Allowed rate-limit decisions that left fewer tokens than the near-limit fraction of the policy's burst, by policy.")
	m.inQueue = histogram("rate_limiting.request.time_in_queue", "Time admitted requests waited in a shaping queue.", outcome.QueueSeconds())
	m.queued = upDown("rate_limiting.queued_requests", "Requests waiting in shaping queues.")
	m.active = upDown("rate_limiting.active_requests", "Requests holding an in-flight slot of MaxInFlight or MaxInFlightTotal.")
	m.duration = histogram("rate_limiting.store.duration", "Time taken to decide a request, store round trips included.", outcome.DecisionSeconds())
	m.errors = counter("rate_limiting.store.errors", "{error}", "Errors of the rate-limit store.")
	var err error
	m.degraded, err = meter.Int64Gauge("rate_limiting.store.degraded", metric.WithUnit("1"),
		metric.WithDescription("1 while the rate-limit store fails and a fallback decides, else 0."))
	check("rate_limiting.store.degraded", err)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if _, err := meter.RegisterCallback(m.observeOccupancy, m.queued, m.active); err != nil {
		return nil, fmt.Errorf("otellimit: New: rate_limiting.queued_requests, rate_limiting.active_requests: %w", err)
	}
	m.degraded.Record(context.Background(), 0)
	return m, nil
}

// addOptions returns the options that give a measurement the attributes
// of policy and res, as a slice to pass on whole (no allocation).
func addOptions(policy string, res outcome.Outcome) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(policyKey.String(policy), resultKey.String(outcome.Names[res])))}
}

// Observe is a ratelimit.MiddlewareOptions.Observe function: it counts the
// decision of ev, the policies it left near their limit (see SetNearLimit)
// and the wait it was given in a shaping queue, and marks the span of r's
// context when it is recording.
func (m *Metrics) Observe(r *http.Request, ev ratelimit.Event) {
	ctx := r.Context()
	var la *limiterAttrs
	var policies []ratelimit.Policy
	if ev.Limiter != nil {
		la = m.attrs(ev.Limiter)
		policies = ev.Limiter.Policies()
	}
	if ev.Err != nil {
		res := outcome.Invalid
		if errors.Is(ev.Err, ratelimit.ErrStore) {
			res = outcome.StoreError
		}
		for i := range policies {
			m.requests.Add(ctx, 1, la.requests[i][res]...)
		}
		markUndecided(ctx, res)
		return
	}
	m.duration.Record(ctx, ev.Elapsed.Seconds())
	res := ev.Result
	if !res.Allowed && res.Policy != nil {
		switch {
		case res.Policy.Name == inFlightPolicy:
			m.requests.Add(ctx, 1, m.inFlightLimited...)
			markRefused(ctx, inFlightPolicy, outcome.Limited, res)
			return
		case outcome.IsBan(res) && la != nil:
			// A ban answers before the other policies are asked.
			m.requests.Add(ctx, 1, la.requests[la.index(policies, res.Policy)][outcome.Banned]...)
			markRefused(ctx, res.Policy.Name, outcome.Banned, res)
			return
		}
	}
	if res.Delay > 0 {
		m.inQueue.Record(ctx, res.Delay.Seconds())
	}
	near := m.nearFraction.Load()
	all := res.Results // nil for a Limiter of one policy
	for i := range policies {
		p := &policies[i]
		own := res
		if all != nil {
			own = all[i]
		}
		o := outcome.Of(p, own)
		m.requests.Add(ctx, 1, la.requests[i][o]...)
		if o == outcome.Allowed && res.Allowed && outcome.Near(own.Remaining, p.Limit.Burst(), near) {
			m.nearLimit.Add(ctx, 1, la.near[i]...)
		}
	}
	markDecided(ctx, policies, res)
}

// attrs returns the attribute sets of l's policies, made the first time l
// is seen. Past maxLimiters limiters, it makes them anew at each call.
func (m *Metrics) attrs(l *ratelimit.Limiter) *limiterAttrs {
	if la := m.first.Load(); la != nil && la.lim == l {
		return la
	}
	if la, ok := m.limiters.Load(l); ok {
		return la.(*limiterAttrs)
	}
	la := newLimiterAttrs(l)
	if m.nSeen.Load() >= maxLimiters {
		return la
	}
	if prev, loaded := m.limiters.LoadOrStore(l, la); loaded {
		return prev.(*limiterAttrs)
	}
	if m.nSeen.Add(1) > maxLimiters {
		m.limiters.Delete(l)
		return la
	}
	m.first.CompareAndSwap(nil, la)
	return la
}

func newLimiterAttrs(l *ratelimit.Limiter) *limiterAttrs {
	policies := l.Policies()
	la := &limiterAttrs{lim: l, occ: occupancy.Of(l),
		requests: make([][outcome.N][]metric.AddOption, len(policies)), near: make([][]metric.AddOption, len(policies))}
	for i, p := range policies {
		for res := range outcome.N {
			la.requests[i][res] = addOptions(p.Name, res)
		}
		la.near[i] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(policyKey.String(p.Name)))}
	}
	return la
}

// index returns the index of p among policies, the limiter's: the one it
// points to, or else the one of its name (a per-key limit's copy).
func (la *limiterAttrs) index(policies []ratelimit.Policy, p *ratelimit.Policy) int {
	for i := range policies {
		if &policies[i] == p {
			return i
		}
	}
	for i := range policies {
		if policies[i].Name == p.Name {
			return i
		}
	}
	return 0 // not the limiter's: cannot be, a ban refuses by one of its policies
}

// observeOccupancy reports, at each collection, the requests that wait in
// shaping queues and hold in-flight slots, summed over the limiters seen.
func (m *Metrics) observeOccupancy(_ context.Context, o metric.Observer) error {
	var queued, active int64
	m.limiters.Range(func(_, v any) bool {
		if occ := v.(*limiterAttrs).occ; occ != nil {
			queued += occ.Queued.Load()
			active += occ.InFlight.Load()
		}
		return true
	})
	o.ObserveInt64(m.queued, queued)
	o.ObserveInt64(m.active, active)
	return nil
}

// OnError counts an error of the store in rate_limiting.store.errors; use
// it as failover.Options's OnError.
func (m *Metrics) OnError(error) { m.errors.Add(context.Background(), 1) }

// OnHealthChange sets rate_limiting.store.degraded, 0 when healthy and 1
// when not; use it as failover.Options's OnHealthChange.
func (m *Metrics) OnHealthChange(healthy bool, _ error) {
	var v int64 = 1
	if healthy {
		v = 0
	}
	m.degraded.Record(context.Background(), v)
}
