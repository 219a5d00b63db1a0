// Package metrics exports the decisions of a ratelimit.Middleware, and the
// health of its store, as Prometheus metrics:
//
//	ratelimit_decisions_total{policy, outcome}   counter
//	ratelimit_near_limit_total{policy}           counter, allowed decisions that left few tokens
//	ratelimit_decision_duration_seconds          histogram
//	ratelimit_shaping_delay_seconds              histogram
//	ratelimit_store_degraded                     gauge, 1 while a failover.Store's primary fails
//	ratelimit_store_errors_total                 counter
//	ratelimit_keys{store}                        gauge, keys held by an in-process store
//	ratelimit_warnings_total{kind}               counter, misconfiguration warnings
//
// A decision is counted once per policy of the limiter that decided, with
// an outcome among the constants below; a MaxInFlight refusal once, as
// "limited" by the policy "inflight", and a ban's once, as "banned" by the
// punished policy. Labels never carry a client's key. Wire it up through
// ratelimit.MiddlewareOptions (Observe: m.Observe, Logger: m.Logger(h)),
// ratelimit.IPOptions (Logger) and failover.Options (OnError: m.OnError,
// OnHealthChange: m.OnHealthChange); docs/operating.md has PromQL for them.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/outcome"
)

// Outcome label values: allowed; limited, refused by the policy (by its
// local share too, below); banned, refused by its penalty box;
// dry_run_limited, what a dry-run policy would have refused; fallback,
// allowed unchecked by a failover.Store while its store failed (Open
// mode); local, allowed by a failover.Store's Local mode while its store
// failed, within this instance's share (ratelimit.Result.Local); and, with
// no decision, store_error (the store failed) and invalid (no key, a bad
// cost).
const (
	Allowed       = "allowed"
	Limited       = "limited"
	Banned        = "banned"
	DryRunLimited = "dry_run_limited"
	Fallback      = "fallback"
	Local         = "local"
	StoreError    = "store_error"
	Invalid       = "invalid"
)

// Metrics counts decisions in Prometheus metrics. It is safe for
// concurrent use.
type Metrics struct {
	decisions   *prometheus.CounterVec
	duration    prometheus.Histogram
	delay       prometheus.Histogram
	degraded    prometheus.Gauge
	storeErrors prometheus.Counter
	warnings    *prometheus.CounterVec
	nearLimit   *prometheus.CounterVec
	reg         prometheus.Registerer

	nearFraction atomic.Uint64 // of SetNearLimit, in 1e-18ths
}

// New registers the metrics with reg and returns them. If one cannot be
// registered (reg already has it: call New once per registry), New returns
// an error naming it and leaves reg as it was.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_decisions_total",
			Help: "Rate-limit decisions by policy and outcome.",
		}, []string{"policy", "outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_decision_duration_seconds",
			Help:    "Time taken to decide a request, store round trip included.",
			Buckets: outcome.DecisionSeconds(),
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_shaping_delay_seconds",
			Help:    "Time admitted requests waited in a shaping queue.",
			Buckets: outcome.QueueSeconds(),
		}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ratelimit_store_degraded",
			Help: "1 while the rate-limit store fails and a fallback decides, else 0.",
		}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_store_errors_total",
			Help: "Errors of the rate-limit store.",
		}),
		warnings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_warnings_total",
			Help: "Misconfiguration warnings logged by the middleware or KeyByIP, by kind.",
		}, []string{"kind"}),
		nearLimit: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_near_limit_total",
			Help: "Allowed rate-limit decisions that left fewer tokens than the near-limit fraction of the policy's burst, by policy.",
		}, []string{"policy"}),
		reg: reg,
	}
	m.nearFraction.Store(outcome.DefaultNear)
	names := []string{"ratelimit_decisions_total", "ratelimit_decision_duration_seconds", "ratelimit_shaping_delay_seconds",
		"ratelimit_store_degraded", "ratelimit_store_errors_total", "ratelimit_warnings_total", "ratelimit_near_limit_total"}
	cs := []prometheus.Collector{m.decisions, m.duration, m.delay, m.degraded, m.storeErrors, m.warnings, m.nearLimit}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("metrics: New: registering %s: %w", names[i], err)
		}
	}
	return m, nil
}

// inFlightPolicy is the name of the policy that a refusal by
// ratelimit.MiddlewareOptions.MaxInFlight reports.
const inFlightPolicy = "inflight"

// Observe is a ratelimit.MiddlewareOptions.Observe function: it counts the
// decision of ev, and the policies it left near their limit (see
// SetNearLimit).
func (m *Metrics) Observe(_ *http.Request, ev ratelimit.Event) {
	var policies []ratelimit.Policy
	if ev.Limiter != nil {
		policies = ev.Limiter.Policies()
	}
	if ev.Err != nil {
		o := Invalid
		if errors.Is(ev.Err, ratelimit.ErrStore) {
			o = StoreError
		}
		for i := range policies {
			m.decisions.WithLabelValues(policies[i].Name, o).Inc()
		}
		return
	}
	m.duration.Observe(ev.Elapsed.Seconds())
	res := ev.Result
	if !res.Allowed && res.Policy != nil {
		switch name := res.Policy.Name; {
		case name == inFlightPolicy:
			m.decisions.WithLabelValues(inFlightPolicy, Limited).Inc()
			return
		case outcome.IsBan(res):
			// A ban answers before the other policies are asked.
			m.decisions.WithLabelValues(name, Banned).Inc()
			return
		}
	}
	if res.Delay > 0 {
		m.delay.Observe(res.Delay.Seconds())
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
		m.decisions.WithLabelValues(p.Name, outcome.Names[o]).Inc()
		if o != outcome.Allowed || !res.Allowed {
			continue
		}
		if outcome.Near(own.Remaining, p.Limit.Burst(), near) {
			m.nearLimit.WithLabelValues(p.Name).Inc()
		}
	}
}

// Logger returns a logger that counts the warnings logged through it (the
// records with a "warning" attribute, by kind) in ratelimit_warnings_total,
// even when h's level drops them, and passes every record on to h (nil for
// slog.Default's handler). Give it as MiddlewareOptions.Logger and
// IPOptions.Logger.
func (m *Metrics) Logger(h slog.Handler) *slog.Logger {
	if h == nil {
		h = slog.Default().Handler()
	}
	return slog.New(&warnCounter{next: h, warnings: m.warnings})
}

// warnCounter is the slog.Handler of Logger: it counts the records that
// carry a "warning" attribute by kind and hands every record to next.
type warnCounter struct {
	next     slog.Handler
	warnings *prometheus.CounterVec
	kind     string // the kind of a "warning" attribute added by WithAttrs
}

// Enabled reports whether next handles level, and is true for warnings,
// which are counted whatever next does with them.
func (h *warnCounter) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn || h.next.Enabled(ctx, level)
}

func (h *warnCounter) Handle(ctx context.Context, r slog.Record) error {
	kind := h.kind
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "warning" && a.Value.Kind() == slog.KindString {
			kind = a.Value.String()
			return false
		}
		return true
	})
	if kind != "" {
		h.warnings.WithLabelValues(kind).Inc()
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *warnCounter) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	for _, a := range attrs {
		if a.Key == "warning" && a.Value.Kind() == slog.KindString {
			c.kind = a.Value.String()
		}
	}
	c.next = h.next.WithAttrs(attrs)
	return &c
}

func (h *warnCounter) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// OnError counts an error of the store; use it as failover.Options's
// OnError.
func (m *Metrics) OnError(error) { m.storeErrors.Inc() }

// OnHealthChange sets ratelimit_store_degraded; use it as
// failover.Options's OnHealthChange.
func (m *Metrics) OnHealthChange(healthy bool, _ error) {
	if healthy {
		m.degraded.Set(0)
	} else {
		m.degraded.Set(1)
	}
}

// TrackKeys exports the number of keys an in-process store holds, such as
// a memorystore's Len, as ratelimit_keys{store=name}, read at each scrape.
// It returns an error naming the store when the registry refuses the
// gauge, as it does for a name already tracked.
func (m *Metrics) TrackKeys(name string, keys func() int) error {
	err := m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "ratelimit_keys",
		Help:        "Keys held by an in-process rate-limit store.",
		ConstLabels: prometheus.Labels{"store": name},
	}, func() float64 { return float64(keys()) }))
	if err != nil {
		return fmt.Errorf("metrics: TrackKeys(%q): %w", name, err)
	}
	return nil
}
