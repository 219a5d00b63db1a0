// Package metrics exports the decisions of a ratelimit.Middleware, and the
// health of its store, as Prometheus metrics:
//
//	ratelimit_decisions_total{policy, outcome}   counter
//	ratelimit_decision_duration_seconds          histogram
//	ratelimit_shaping_delay_seconds              histogram
//	ratelimit_store_degraded                     gauge, 1 while a Failover's store fails
//	ratelimit_store_errors_total                 counter
//	ratelimit_keys{store}                        gauge, keys held by an in-process store
//	ratelimit_warnings_total{kind}               counter, misconfiguration warnings
//
// Outcomes, per policy of the limiter that decided: "allowed", "limited"
// (the policy refused the request), "dry_run_limited" (a dry-run policy
// would have), "fallback" (the store failed and a Failover decided
// instead), "store_error" (no decision: the store failed), and "invalid"
// (no decision: no key, a bad cost). Labels never carry a client's key, so
// the number of series stays small.
//
// Wire it up with ratelimit.WithObserver(m) and, for a Failover, its
// OnError and OnHealthChange hooks.
package metrics

import (
	"errors"
	"net/http"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tokenfair/ratelimit"
)

// Outcome label values.
const (
	Allowed       = "allowed"
	Limited       = "limited"
	DryRunLimited = "dry_run_limited"
	Fallback      = "fallback"
	StoreError    = "store_error"
	Invalid       = "invalid"
)

// Metrics is a [ratelimit.Observer] that counts decisions in Prometheus
// metrics. It is safe for concurrent use.
type Metrics struct {
	decisions   *prometheus.CounterVec
	duration    prometheus.Histogram
	delay       prometheus.Histogram
	degraded    prometheus.Gauge
	storeErrors prometheus.Counter
	warnings    *prometheus.CounterVec
	reg         prometheus.Registerer
}

var (
	_ ratelimit.Observer = (*Metrics)(nil)
	_ ratelimit.Warner   = (*Metrics)(nil)
)

// New registers the metrics with reg and returns them.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_decisions_total",
			Help: "Rate-limit decisions by policy and outcome.",
		}, []string{"policy", "outcome"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_decision_duration_seconds",
			Help:    "Time taken to decide a request, store round trip included.",
			Buckets: []float64{.00001, .00005, .0001, .0005, .001, .005, .01, .05, .1, .5},
		}),
		delay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ratelimit_shaping_delay_seconds",
			Help:    "Time admitted requests waited in a shaping queue.",
			Buckets: []float64{.001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10},
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
			Help: "Misconfiguration warnings logged by the middleware or KeyByIP (with WarnTo), by kind.",
		}, []string{"kind"}),
		reg: reg,
	}
	for _, c := range []prometheus.Collector{m.decisions, m.duration, m.delay, m.degraded, m.storeErrors, m.warnings} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Observe implements [ratelimit.Observer].
func (m *Metrics) Observe(_ *http.Request, ev ratelimit.Event) {
	if ev.Err != nil {
		outcome := Invalid
		if errors.Is(ev.Err, ratelimit.ErrStore) {
			outcome = StoreError
		}
		for _, p := range ev.Policies {
			m.decisions.WithLabelValues(p, outcome).Inc()
		}
		return
	}
	m.duration.Observe(ev.Elapsed.Seconds())
	res := ev.Result
	if res.Delay > 0 {
		m.delay.Observe(res.Delay.Seconds())
	}
	for _, p := range ev.Policies {
		m.decisions.WithLabelValues(p, outcome(p, res)).Inc()
	}
}

func outcome(policy string, res ratelimit.Result) string {
	switch {
	case slices.Contains(res.Violated(), policy):
		return Limited
	case slices.Contains(res.DryRunViolated(), policy):
		return DryRunLimited
	case res.Degraded:
		return Fallback
	}
	return Allowed
}

// Warn implements [ratelimit.Warner]: it counts a misconfiguration warning.
func (m *Metrics) Warn(kind string) { m.warnings.WithLabelValues(kind).Inc() }

// OnError counts an error of the store; use it as a FailoverConfig's
// OnError.
func (m *Metrics) OnError(error) { m.storeErrors.Inc() }

// OnHealthChange sets ratelimit_store_degraded; use it as a
// FailoverConfig's OnHealthChange.
func (m *Metrics) OnHealthChange(healthy bool, _ error) {
	if healthy {
		m.degraded.Set(0)
	} else {
		m.degraded.Set(1)
	}
}

// TrackKeys exports the number of keys an in-process store holds, such as
// a memorystore's Len, as ratelimit_keys{store=name}, read at each scrape.
func (m *Metrics) TrackKeys(name string, keys func() int) error {
	return m.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "ratelimit_keys",
		Help:        "Keys held by an in-process rate-limit store.",
		ConstLabels: prometheus.Labels{"store": name},
	}, func() float64 { return float64(keys()) }))
}
