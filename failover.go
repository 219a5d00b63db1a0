package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"
)

// FailureMode is what a [Failover] does while its primary store fails.
type FailureMode uint8

const (
	// FailOpen allows every request unchecked (Result.Degraded is set, no
	// rate-limit header fields are written). Availability first: the API
	// stays up, unprotected.
	FailOpen FailureMode = iota
	// FailClosed refuses every request: the middleware answers 503 with
	// Retry-After and the temporary-reduced-capacity problem type.
	// Protection first: nothing passes that was not counted.
	FailClosed
	// FailLocal decides in an in-process store with the shared quota
	// divided among the instances: with N instances each allows 1/N of the
	// rate and of the burst (at least 1, and at least the request's cost),
	// so together they stay near the shared quota instead of multiplying
	// it.
	FailLocal
)

var failureModeNames = [...]string{FailOpen: "open", FailClosed: "closed", FailLocal: "local"}

// String returns "open", "closed" or "local".
func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// ParseFailureMode returns the FailureMode whose String is s.
func ParseFailureMode(s string) (FailureMode, error) {
	for i, name := range failureModeNames {
		if name == s {
			return FailureMode(i), nil
		}
	}
	return 0, fmt.Errorf("ratelimit: unknown failure mode %q: want open, closed or local", s)
}

// ErrStoreUnavailable is returned by a FailClosed [Failover] while its
// primary store is failing.
var ErrStoreUnavailable = errors.New("ratelimit: store unavailable")

// FailoverConfig configures a [Failover]. The zero value is FailOpen with
// the defaults below.
type FailoverConfig struct {
	// Mode is what to do while the primary store fails. Default FailOpen.
	Mode FailureMode
	// Local is the in-process store that decides in FailLocal mode, such as
	// a memorystore. Required for FailLocal, unused otherwise.
	Local Store
	// Instances is how many instances share the primary store's quota; in
	// FailLocal mode each allows 1/Instances of it. Default 1.
	Instances int64
	// ProbeInterval is how often, while the primary fails, one request is
	// sent to it to see whether it is back; all other requests go straight
	// to the failure mode without waiting for the primary. Default 250 ms.
	ProbeInterval time.Duration
	// OnError, if set, is called with every error of the primary store.
	OnError func(err error)
	// OnHealthChange, if set, is called on every switch between healthy and
	// degraded, with the error that caused a switch to degraded.
	OnHealthChange func(healthy bool, err error)
	// Logger receives one line per switch between healthy and degraded.
	// Default slog.Default().
	Logger *slog.Logger
	// Clock is the time source of the probe schedule. Default time.Now.
	Clock func() time.Time
}

// Failover is a [Store] that forwards to a primary store (typically Redis)
// and, when that fails, decides by its [FailureMode] until the primary
// answers again. After a failure it stops calling the primary, so requests
// do not each pay its timeout, and sends one probe request every
// ProbeInterval; the first probe that succeeds makes it healthy again.
// A call whose own context ended is not a failure of the primary.
// Failover is safe for concurrent use.
type Failover struct {
	primary   Store
	cfg       FailoverConfig
	degraded  atomic.Bool
	nextProbe atomic.Int64
}

var _ BatchStore = (*Failover)(nil)

// NewFailover returns a Failover over primary configured by cfg.
func NewFailover(primary Store, cfg FailoverConfig) (*Failover, error) {
	switch {
	case primary == nil:
		return nil, errors.New("ratelimit: NewFailover: nil primary store")
	case cfg.Mode > FailLocal:
		return nil, fmt.Errorf("ratelimit: NewFailover: unknown mode %v", cfg.Mode)
	case cfg.Mode == FailLocal && cfg.Local == nil:
		return nil, errors.New("ratelimit: NewFailover: FailLocal needs a Local store")
	case cfg.Instances < 0 || cfg.ProbeInterval < 0:
		return nil, errors.New("ratelimit: NewFailover: negative Instances or ProbeInterval")
	}
	if cfg.Instances == 0 {
		cfg.Instances = 1
	}
	if cfg.ProbeInterval == 0 {
		cfg.ProbeInterval = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Failover{primary: primary, cfg: cfg}, nil
}

// Healthy reports whether the primary store answered the last call made to
// it.
func (f *Failover) Healthy() bool { return !f.degraded.Load() }

// Take implements [Store].
func (f *Failover) Take(ctx context.Context, p Policy, key string, cost int64) (Result, error) {
	var cause error
	if f.askPrimary() {
		res, err := f.primary.Take(ctx, p, key, cost)
		if !f.failed(ctx, err) {
			return res, err
		}
		cause = err
	}
	return f.fallback(ctx, p, key, cost, cause)
}

// TakeAll implements [BatchStore] when the primary store does (and
// returns ErrNotAtomic otherwise). While degraded, FailLocal decides in the
// Local store, atomically if it is a BatchStore.
func (f *Failover) TakeAll(ctx context.Context, reqs []Request, results []Result) error {
	bs, ok := f.primary.(BatchStore)
	if !ok {
		return ErrNotAtomic
	}
	var cause error
	if probe := f.degraded.Load(); f.askPrimary() {
		err := bs.TakeAll(ctx, reqs, results)
		if errors.Is(err, ErrNotAtomic) {
			if probe { // no I/O was done: let the Limiter's next Take probe
				f.nextProbe.Store(0)
			}
			return err
		}
		if !f.failed(ctx, err) {
			return err
		}
		cause = err
	}
	switch f.cfg.Mode {
	case FailLocal:
		local, ok := f.cfg.Local.(BatchStore)
		if !ok {
			return ErrNotAtomic
		}
		shared := slices.Clone(reqs)
		for i := range shared {
			shared[i].Policy.Limit = shared[i].Policy.Limit.share(f.cfg.Instances, shared[i].Cost)
		}
		err := local.TakeAll(ctx, shared, results)
		for i := range results {
			results[i].Degraded = true
		}
		return err
	default:
		for i, r := range reqs {
			res, err := f.fallback(ctx, r.Policy, r.Key, r.Cost, cause)
			if err != nil {
				return err
			}
			results[i] = res
		}
		return nil
	}
}

// askPrimary reports whether this call should go to the primary store:
// always while healthy; while degraded, for one call per ProbeInterval.
func (f *Failover) askPrimary() bool {
	if !f.degraded.Load() {
		return true
	}
	now := f.cfg.Clock().UnixNano()
	next := f.nextProbe.Load()
	return now >= next && f.nextProbe.CompareAndSwap(next, now+int64(f.cfg.ProbeInterval))
}

// failed records the outcome of a call to the primary store and reports
// whether it failed, so that the caller must fall back. An error after the
// caller's own context ended is the caller's, not a failure of the store.
func (f *Failover) failed(ctx context.Context, err error) bool {
	switch {
	case err == nil:
		if f.degraded.CompareAndSwap(true, false) {
			f.cfg.Logger.Info("ratelimit: store healthy again", "mode", f.cfg.Mode.String())
			if f.cfg.OnHealthChange != nil {
				f.cfg.OnHealthChange(true, nil)
			}
		}
		return false
	case ctx.Err() != nil:
		return false
	}
	if f.cfg.OnError != nil {
		f.cfg.OnError(err)
	}
	if f.degraded.CompareAndSwap(false, true) {
		f.nextProbe.Store(f.cfg.Clock().UnixNano() + int64(f.cfg.ProbeInterval))
		f.cfg.Logger.Warn("ratelimit: store failed; degraded", "mode", f.cfg.Mode.String(), "err", err)
		if f.cfg.OnHealthChange != nil {
			f.cfg.OnHealthChange(false, err)
		}
	}
	return true
}

func (f *Failover) fallback(ctx context.Context, p Policy, key string, cost int64, cause error) (Result, error) {
	switch f.cfg.Mode {
	case FailClosed:
		if cause != nil {
			return Result{}, fmt.Errorf("%w: %w", ErrStoreUnavailable, cause)
		}
		return Result{}, ErrStoreUnavailable
	case FailLocal:
		p.Limit = p.Limit.share(f.cfg.Instances, cost)
		res, err := f.cfg.Local.Take(ctx, p, key, cost)
		res.Degraded = true
		return res, err
	}
	return Result{Allowed: true, Policy: p.Name, Limit: p.Limit, Degraded: true}, nil
}

// share returns the part of l that one of n instances may use: 1/n of the
// rate and of the burst, within MaxSpan, with a burst of at least cost so
// that a request the shared limit could allow is not refused for ever.
func (l Limit) share(n, cost int64) Limit {
	if n <= 1 {
		return l
	}
	burst := max(l.Burst/n, cost, 1)
	iv := l.Interval
	if iv <= MaxSpan/time.Duration(burst)/time.Duration(n) {
		iv *= time.Duration(n)
	} else {
		iv = MaxSpan / time.Duration(burst)
	}
	return Limit{Interval: iv, Burst: burst}
}
