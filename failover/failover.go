// Package failover provides a [ratelimit.Store] that decides by a chosen
// [Mode] while another store (typically Redis) fails, and goes back to it
// when it answers again.
package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/algo"
	"github.com/tokenfair/ratelimit/internal/storeerr"
)

// Mode is what a [Store] does while its primary store fails. The zero value
// is Open. It implements [encoding.TextMarshaler] and
// [encoding.TextUnmarshaler] with the names "open", "closed" and "local".
type Mode uint8

const (
	// Open allows every request unchecked (Result.Degraded is set, and no
	// rate-limit header fields are written: there are no figures): the
	// API stays up, unprotected.
	Open Mode = iota
	// Closed refuses every request with an error wrapping
	// ratelimit.ErrStore, which the middleware answers with 503 and
	// Retry-After: nothing passes that was not counted.
	Closed
	// Local decides in Options.Local with the shared quota divided among
	// the instances: each allows 1/Instances of the rate, of the burst (at
	// least 1, and at least the request's cost) and of Policy.Immediate,
	// and of a calendar quota's count.
	// Its Results are Degraded and Local, with Policy the share (a copy of
	// the policy, named the same) and the share's figures, from which the
	// middleware writes the rate-limit header fields.
	// What it spends stays spent, and a settled cost (Limiter.Settle) is
	// charged to the share; a penalty box goes on in the Local store,
	// undivided (docs/stores.md).
	Local
)

var modeNames = [...]string{Open: "open", Closed: "closed", Local: "local"}

// String returns "open", "closed" or "local".
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// decides says, for the log, how requests are decided while degraded in m.
func (m Mode) decides() string {
	switch m {
	case Closed:
		return "every request refused (503)"
	case Local:
		return "locally, in this instance's share of each quota"
	}
	return "every request allowed unchecked, without a limit"
}

// MarshalText implements [encoding.TextMarshaler].
func (m Mode) MarshalText() ([]byte, error) {
	if int(m) < len(modeNames) {
		return []byte(modeNames[m]), nil
	}
	return nil, fmt.Errorf("failover: unknown mode %d", uint8(m))
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (m *Mode) UnmarshalText(text []byte) error {
	for i, name := range modeNames {
		if name == string(text) {
			*m = Mode(i)
			return nil
		}
	}
	return fmt.Errorf("failover: unknown mode %q: want open, closed or local", text)
}

// Options configures a [Store]. Every field is optional except Local in
// Local mode: the zero value, or a nil *Options, is the documented default
// of each.
type Options struct {
	// Mode is what to do while the primary store fails. Default: Open.
	Mode Mode
	// Local is the in-process store that decides in Local mode, such as a
	// memorystore. Required for Local, unused otherwise.
	Local ratelimit.Store
	// Instances is how many instances share the primary store's quota; in
	// Local mode each allows 1/Instances of it. Default: 1.
	Instances int64
	// ProbeInterval is how often, while the primary fails, one request is
	// sent to it to see whether it is back, counted from the end of the
	// last, so probes never overlap; all other requests go straight to the
	// Mode without waiting for the primary. Default: 250 ms.
	ProbeInterval time.Duration
	// OnError, if set, is called with every error of the primary store.
	OnError func(err error)
	// OnHealthChange, if set, is called on every switch between healthy and
	// degraded, with the error that caused a switch to degraded.
	OnHealthChange func(healthy bool, err error)
	// Logger receives one line per switch between healthy and degraded.
	// Default: slog.Default().
	Logger *slog.Logger
	// Clock is the time source of the probe schedule. Default: time.Now.
	Clock func() time.Time
}

// Store is a [ratelimit.Store] that forwards to a primary store and, while
// that fails, decides by its [Mode]. While degraded it sends the primary
// one probe request at a time, ProbeInterval after the last ended, and the
// first that succeeds makes it healthy again. A call whose own context
// ended, and an error about one key's stored value (a Redis key of another
// type, say), are no failure of the primary.
//
// A primary made of parts that fail alone, such as a
// [github.com/tokenfair/ratelimit/redisstore.Store] over a Redis Cluster,
// names the part of each key with a method Part(p *ratelimit.Policy, key
// string) string; the Store then keeps each part's health apart, so that
// one dead Cluster primary degrades only the keys of its slots. A key of
// the part "" shares the health of the whole. A primary that may answer
// from caches of its own (redisstore's leases and refusal cache) has a
// method Probe(ctx, p, key) error that asks its server; a probe calls it
// first, so that a cached answer never passes for health.
//
// Store is safe for concurrent use.
type Store struct {
	primary ratelimit.Store
	parted  parted // the primary's, if it has parts
	prober  prober // the primary's, if it has Probe
	cfg     Options
	whole   health
	parts   sync.Map     // string → *health
	nParts  atomic.Int32 // entries in parts, at most maxParts
	shares  sync.Map     // *ratelimit.Policy → *ratelimit.Policy: one instance's share
	nShares atomic.Int32 // entries in shares, at most maxShares
}

// parted is a primary store made of parts that fail alone.
type parted interface {
	Part(p *ratelimit.Policy, key string) string
}

// health is whether a part of the primary store fails, and when it is
// next probed.
type health struct {
	name      string // the part's, "" for the whole
	degraded  atomic.Bool
	nextProbe atomic.Int64
}

// maxParts bounds the parts whose health is kept apart; a key of a part
// past it shares the health of the whole.
const maxParts = 1024

// health returns the health of the part of the primary that holds key
// under p.
func (f *Store) health(p *ratelimit.Policy, key string) *health {
	if f.parted == nil {
		return &f.whole
	}
	name := f.parted.Part(p, key)
	if name == "" {
		return &f.whole
	}
	if h, ok := f.parts.Load(name); ok {
		return h.(*health)
	}
	if f.nParts.Load() >= maxParts {
		return &f.whole
	}
	h, loaded := f.parts.LoadOrStore(name, &health{name: name})
	if !loaded {
		f.nParts.Add(1)
	}
	return h.(*health)
}

var _ ratelimit.BatchStore = (*Store)(nil)

// New returns a Store over primary configured by opts (nil for the
// defaults). It returns an error naming the field at fault.
func New(primary ratelimit.Store, opts *Options) (*Store, error) {
	var cfg Options
	if opts != nil {
		cfg = *opts
	}
	switch {
	case primary == nil:
		return nil, errors.New("failover: New: nil primary store")
	case cfg.Mode > Local:
		return nil, fmt.Errorf("failover: Options.Mode: unknown mode %d", uint8(cfg.Mode))
	case cfg.Mode == Local && cfg.Local == nil:
		return nil, errors.New("failover: Options.Local: the Local mode needs a local store")
	case cfg.Instances < 0:
		return nil, fmt.Errorf("failover: Options.Instances %d: want at least 1, or 0 for 1", cfg.Instances)
	case cfg.ProbeInterval < 0:
		return nil, fmt.Errorf("failover: Options.ProbeInterval %v: want a positive interval, or 0 for 250ms", cfg.ProbeInterval)
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
	f := &Store{primary: primary, cfg: cfg}
	f.parted, _ = primary.(parted)
	f.prober, _ = primary.(prober)
	return f, nil
}

// Healthy reports whether the primary store answered the last call made to
// it, and to each of its parts.
func (f *Store) Healthy() bool {
	healthy := !f.whole.degraded.Load()
	f.parts.Range(func(_, h any) bool {
		healthy = healthy && !h.(*health).degraded.Load()
		return healthy
	})
	return healthy
}

// Take implements [ratelimit.Store].
func (f *Store) Take(ctx context.Context, p *ratelimit.Policy, key string, cost int64) (ratelimit.Result, error) {
	var cause error
	h := f.health(p, key)
	if ask, probe := f.askPrimary(h); ask {
		if cause = f.probeFails(ctx, h, p, key, probe); cause == nil {
			res, err := f.primary.Take(ctx, p, key, cost)
			if !f.failed(ctx, h, err, probe) {
				return res, err
			}
			cause = err
		}
	}
	return f.fallback(ctx, p, key, cost, cause)
}

// prober is a primary store whose answers may come from a cache of its
// own (redisstore: a lease, or the refusal cache), which proves nothing of
// its health: Probe asks the store itself, for the part of key.
type prober interface {
	Probe(ctx context.Context, p *ratelimit.Policy, key string) error
}

// probeFails, for a probe (probe ≠ 0) of a primary that is a prober, asks
// it for the part of key and records the answer (failed); it returns the
// error of a failed probe, else nil, and then the call goes on to the
// primary.
func (f *Store) probeFails(ctx context.Context, h *health, p *ratelimit.Policy, key string, probe int64) error {
	if probe == 0 || f.prober == nil {
		return nil
	}
	if err := f.prober.Probe(ctx, p, key); f.failed(ctx, h, err, probe) {
		return err
	}
	return nil
}

// TakeAll implements [ratelimit.BatchStore]: with the primary's TakeAll
// while healthy (errors.ErrUnsupported if it has none), and in Local mode
// while degraded with the Local store's, if it is a BatchStore. The health
// is that of the part of reqs' first key (a primary's TakeAll decides keys
// of one part together).
func (f *Store) TakeAll(ctx context.Context, reqs []ratelimit.BatchItem, results []ratelimit.Result) error {
	var cause error
	h := &f.whole
	if len(reqs) > 0 {
		h = f.health(reqs[0].Policy, reqs[0].Key)
	}
	if ask, probe := f.askPrimary(h); ask {
		bs, ok := f.primary.(ratelimit.BatchStore)
		if !ok {
			h.handBack(probe) // no I/O was done: the Limiter's next Take probes
			return errors.ErrUnsupported
		}
		if len(reqs) > 0 {
			cause = f.probeFails(ctx, h, reqs[0].Policy, reqs[0].Key, probe)
		}
		if cause == nil {
			err := bs.TakeAll(ctx, reqs, results)
			if errors.Is(err, errors.ErrUnsupported) {
				h.handBack(probe) // no I/O was done: the Limiter's next Take probes
				return err
			}
			if !f.failed(ctx, h, err, probe) {
				return err
			}
			cause = err
		}
	}
	switch f.cfg.Mode {
	case Local:
		local, ok := f.cfg.Local.(ratelimit.BatchStore)
		if !ok {
			return errors.ErrUnsupported
		}
		shared := slices.Clone(reqs)
		for i := range shared {
			shared[i].Policy = f.share(shared[i].Policy, shared[i].Cost)
		}
		err := local.TakeAll(ctx, shared, results)
		for i := range reqs {
			results[i].Degraded, results[i].Local, results[i].Policy = true, true, shared[i].Policy // see fallback
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

// askPrimary reports whether this call, to the part of health h, should go
// to the primary store: always while healthy; while degraded, for one call
// per ProbeInterval, the probe, for which it also returns the probe's slot
// (else 0), to hand back should the probe learn nothing. A probe in flight
// holds the next one back until it ends (failed), however slow the
// primary, or for probeHold intervals should it never end.
func (f *Store) askPrimary(h *health) (ask bool, probe int64) {
	if !h.degraded.Load() {
		return true, 0
	}
	now := f.cfg.Clock().UnixNano()
	next := h.nextProbe.Load()
	probe = now + probeHold*int64(f.cfg.ProbeInterval)
	if now < next || !h.nextProbe.CompareAndSwap(next, probe) {
		return false, 0
	}
	return true, probe
}

// probeHold is how many ProbeIntervals a probe in flight holds the next
// one back at most: one that has not ended by then hangs, and no longer
// stops the store from seeing the primary come back.
const probeHold = 8

// handBack lets the next call probe at once, when probe, the slot of a
// probe that learned nothing of the part's health, is still the latest.
// (0: the call was no probe.)
func (h *health) handBack(probe int64) {
	if probe != 0 {
		h.nextProbe.CompareAndSwap(probe, 0)
	}
}

// failed records the outcome of a call to the primary store, a probe if
// probe is not 0, and reports whether it failed, so that the caller must
// fall back. An answer about one key's state (storeerr.ErrKeyState) is an
// answer: the store works, and the error is that key's. An error after
// the caller's own context ended is the caller's, not a failure of the
// store; a probe that ended so hands the probe to the next call.
func (f *Store) failed(ctx context.Context, h *health, err error, probe int64) bool {
	switch {
	case err == nil, errors.Is(err, storeerr.ErrKeyState):
		if err != nil && f.cfg.OnError != nil {
			f.cfg.OnError(err)
		}
		if h.degraded.CompareAndSwap(true, false) {
			f.cfg.Logger.Info("ratelimit: store healthy again", "mode", f.cfg.Mode.String(), "part", h.name)
			if f.cfg.OnHealthChange != nil {
				f.cfg.OnHealthChange(true, nil)
			}
		}
		return false
	case ctx.Err() != nil:
		h.handBack(probe)
		return false
	}
	if f.cfg.OnError != nil {
		f.cfg.OnError(err)
	}
	next := f.cfg.Clock().UnixNano() + int64(f.cfg.ProbeInterval) // the next probe: an interval after this call ended
	if probe != 0 {
		h.nextProbe.CompareAndSwap(probe, next)
	}
	if h.degraded.CompareAndSwap(false, true) {
		h.nextProbe.Store(next)
		f.cfg.Logger.Warn("ratelimit: store failed; degraded", "mode", f.cfg.Mode.String(), "decides", f.cfg.Mode.decides(), "part", h.name, "err", err)
		if f.cfg.OnHealthChange != nil {
			f.cfg.OnHealthChange(false, err)
		}
	}
	return true
}

func (f *Store) fallback(ctx context.Context, p *ratelimit.Policy, key string, cost int64, cause error) (ratelimit.Result, error) {
	switch f.cfg.Mode {
	case Closed:
		if cause != nil {
			return ratelimit.Result{}, fmt.Errorf("%w: unavailable, failing closed: %w", ratelimit.ErrStore, cause)
		}
		return ratelimit.Result{}, fmt.Errorf("%w: unavailable, failing closed", ratelimit.ErrStore)
	case Local:
		s := f.share(p, cost)
		res, err := f.cfg.Local.Take(ctx, s, key, cost)
		// Decided under the share, p's copy named as p: a Limiter knows it
		// as p's (Result.Local), and writes the header fields of the share.
		res.Degraded, res.Local, res.Policy = true, true, s
		return res, err
	}
	return ratelimit.Result{Allowed: true, Policy: p, Degraded: true}, nil
}

var _ ratelimit.RefundStore = (*Store)(nil)

// Refund implements [ratelimit.RefundStore]: while healthy the primary
// gives the tokens back, if it is a RefundStore; while degraded nothing is
// given back, in every mode.
func (f *Store) Refund(ctx context.Context, p *ratelimit.Policy, key string, cost int64, took ratelimit.Result) error {
	rs, ok := f.primary.(ratelimit.RefundStore)
	h := f.health(p, key)
	if !ok || h.degraded.Load() {
		return nil
	}
	err := rs.Refund(ctx, p, key, cost, took)
	if f.failed(ctx, h, err, 0) {
		return nil // the tokens stay spent, as while degraded
	}
	return err
}

// maxShares bounds the shares kept, in case policies are made as requests
// come; a policy past it gets a new share every time.
const maxShares = 1024

// share returns the policy that one of the instances may use in Local
// mode: p with 1/Instances of the rate, of the burst and of Immediate (of
// a calendar quota, of its count), within 50 years a span, and a burst of
// at least cost so that a request the shared limit could allow is not
// refused for ever (but for a charge past empty, algo.Debt, which takes
// its whole cost from the share). MaxDelay stays, cut to the share's span. The
// shares of costs up to a share's burst are made once per policy. A
// penalty box's buckets (its strikes, bans and ban, whose names, unlike a
// policy's, have a "/") are no quota to divide: they stay as they are.
func (f *Store) share(p *ratelimit.Policy, cost int64) *ratelimit.Policy {
	n := f.cfg.Instances
	if n <= 1 || strings.Contains(p.Name, "/") {
		return p
	}
	if s, ok := f.shares.Load(p); ok && cost <= s.(*ratelimit.Policy).Limit.Burst() {
		return s.(*ratelimit.Policy)
	}
	burst := max(p.Limit.Burst()/n, 1)
	if p.Algorithm != algo.Debt {
		burst = max(burst, cost)
	}
	s := *p
	if iv := p.Limit.Interval(); iv == 0 {
		s.Limit = p.Limit.WithBurst(burst) // a calendar quota: 1/Instances of it
	} else {
		const maxSpan = 50 * 365 * 24 * time.Hour
		if iv <= maxSpan/time.Duration(burst)/time.Duration(n) {
			iv *= time.Duration(n)
		} else {
			iv = maxSpan / time.Duration(burst)
		}
		s.Limit = ratelimit.Per(1, iv).WithBurst(burst)
		s.Immediate = p.Immediate / n
		s.MaxDelay = min(p.MaxDelay, time.Duration(burst)*iv)
	}
	// A settlement's charge (algo.Debt) is a copy made for the occasion.
	if burst == max(p.Limit.Burst()/n, 1) && p.Algorithm != algo.Debt && f.nShares.Load() < maxShares {
		if prev, loaded := f.shares.LoadOrStore(p, &s); loaded {
			return prev.(*ratelimit.Policy)
		}
		f.nShares.Add(1)
	}
	return &s
}
