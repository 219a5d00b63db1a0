package main

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/tokenfair/ratelimit"
)

// quotas is a set of calendar quotas of requests that a key may have: the
// server has a limiter for each set it needs, so that a key without a daily
// quota has no "daily" policy at all. (The quota of bytes, -daily-bytes, is
// no plan's: every limiter has it, or none.)
type quotas uint8

const (
	dailyQuota quotas = 1 << iota
	monthlyQuota
	allQuotas = dailyQuota | monthlyQuota
)

// limiters are the server's limiters, which share one store: one for each
// set of calendar quotas, with the rate policy of -rate and -burst before
// the quotas, and after them the quota of bytes of -daily-bytes and the
// global policy of -global-rate. Without -plans only the limiter of the
// flags' quotas is built; with it, all four, and a key's plan picks its
// limiter, while each policy's LimitFor gives the key the plan's limits.
type limiters struct {
	of    [allQuotas + 1]*ratelimit.Limiter // by set of quotas; nil when not built
	flags quotas                            // those of -daily and -monthly
	key   ratelimit.KeyFunc
	plans *planTable // nil without -plans
	store ratelimit.Store
	ps    *policies
}

// newLimiters returns the limiters of cfg over store; with plans, their
// policies take each key's limits from it.
func newLimiters(cfg config, store ratelimit.Store, key ratelimit.KeyFunc, plans *planTable) (*limiters, error) {
	ps, err := newPolicies(cfg, plans)
	if err != nil {
		return nil, err
	}
	ls := &limiters{key: key, plans: plans, store: store, ps: ps}
	if cfg.daily > 0 {
		ls.flags |= dailyQuota
	}
	if cfg.monthly > 0 {
		ls.flags |= monthlyQuota
	}
	for q := range ls.of {
		if plans == nil && quotas(q) != ls.flags {
			continue
		}
		if ls.of[q], err = ratelimit.New(store, ps.with(quotas(q))...); err != nil {
			return nil, fmt.Errorf("%s: %w", limitFlags(cfg), err)
		}
	}
	return ls, nil
}

// own is the limiter of the keys without a plan.
func (ls *limiters) own() *ratelimit.Limiter { return ls.of[ls.flags] }

// all is the limiter with every policy a key may have, to forget a key's
// state under each.
func (ls *limiters) all() *ratelimit.Limiter {
	if ls.plans == nil {
		return ls.own()
	}
	return ls.of[allQuotas]
}

// pick is the Middleware's LimiterFor: the limiter of the quotas of r's
// key's plan, or nil (the own one) for a key without a plan or with the
// flags' quotas.
func (ls *limiters) pick(r *http.Request) *ratelimit.Limiter {
	key, err := ls.key(r)
	if err != nil {
		return nil // the Middleware answers the key's error
	}
	p := ls.plans.get(key)
	if p == nil || p.quotas() == ls.flags {
		return nil
	}
	return ls.of[p.quotas()]
}

// defaults returns what a plan's missing fields take: the flags of cfg.
func (ls *limiters) defaults(cfg config) planDefaults {
	return planDefaults{rate: cfg.rate, burst: cfg.burst, daily: cfg.daily, monthly: cfg.monthly, loc: ls.ps.loc}
}

// checkRate reports why the rate policy cannot apply l, a plan's rate, as
// ratelimit.New would.
func (ls *limiters) checkRate(l ratelimit.Limit) error {
	p := ls.ps.rate
	p.Limit, p.LimitFor = l, nil
	_, err := ratelimit.New(ls.store, p)
	return err
}

// policies are the server's policies: the per-client rate and calendar
// quotas of requests, the per-client daily quota of bytes (nil without
// -daily-bytes), and the global limit (nil without -global-rate).
type policies struct {
	rate, daily, monthly ratelimit.Policy
	dailyBytes           *ratelimit.Policy
	global               *ratelimit.Policy
	loc                  *time.Location // of the quotas, -tz
}

// with returns the policies of a limiter for keys with the quotas q, and
// the quota of bytes whatever q.
func (ps *policies) with(q quotas) []ratelimit.Policy {
	list := []ratelimit.Policy{ps.rate}
	if q&dailyQuota != 0 {
		list = append(list, ps.daily)
	}
	if q&monthlyQuota != 0 {
		list = append(list, ps.monthly)
	}
	if ps.dailyBytes != nil {
		list = append(list, *ps.dailyBytes)
	}
	if ps.global != nil {
		list = append(list, *ps.global)
	}
	return list
}

// newPolicies returns the per-client policies of -rate and -burst, -daily
// and -monthly, with -daily-bytes the quota of bytes, and with -global-rate
// the global one. With plans, the per-client policies of requests give
// each key its plan's limits; a quota that no flag sets is then only for
// the keys whose plan has it, and its policy's own Limit a placeholder for
// a key whose plan changed under its request. The quota of bytes counts
// "content-bytes": the Middleware reserves a byte of each request and
// charges it the bytes of its response's body once written.
func newPolicies(cfg config, plans *planTable) (*policies, error) {
	limit, err := limitOf(cfg.rate, cfg.burst)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", limitFlags(cfg), err)
	}
	loc, err := time.LoadLocation(cfg.tz)
	if err != nil {
		return nil, fmt.Errorf("-tz %s: %w", cfg.tz, err)
	}
	quota := func(n int64) int64 {
		if n == 0 {
			return maxQuota
		}
		return n
	}
	ps := &policies{loc: loc,
		rate: ratelimit.Policy{Limit: limit, Algorithm: cfg.algorithm, DryRun: cfg.dryRun,
			Penalty: ratelimit.Penalty{After: cfg.banAfter, Within: cfg.banWithin, For: cfg.banFor}},
		daily:   ratelimit.Policy{Name: "daily", Limit: ratelimit.Daily(quota(cfg.daily), loc), DryRun: cfg.dryRun},
		monthly: ratelimit.Policy{Name: "monthly", Limit: ratelimit.Monthly(quota(cfg.monthly), loc), DryRun: cfg.dryRun},
	}
	if n := cfg.dailyBytes; n > 0 {
		ps.dailyBytes = &ratelimit.Policy{Name: "daily-bytes", Unit: "content-bytes", Limit: ratelimit.Daily(n, loc), DryRun: cfg.dryRun}
	}
	if room := time.Duration(limit.Burst()) * limit.Interval(); cfg.algorithm == ratelimit.LeakyShape && room > maxShapingWait {
		ps.rate.MaxDelay = maxShapingWait // a longer wait could not be answered
	}
	if plans != nil {
		ps.rate.LimitFor = plans.limitFor(func(p *plan) ratelimit.Limit { return p.rate })
		ps.daily.LimitFor = plans.limitFor(func(p *plan) ratelimit.Limit { return p.daily })
		ps.monthly.LimitFor = plans.limitFor(func(p *plan) ratelimit.Limit { return p.monthly })
	}
	if cfg.globalRate > 0 {
		burst := cfg.globalBurst
		if burst == 0 {
			burst = max(1, int64(min(cfg.globalRate, math.MaxInt64/2))) // the whole tokens of one second
		}
		global, err := limitOf(cfg.globalRate, burst)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", limitFlags(cfg), err)
		}
		ps.global = &ratelimit.Policy{Name: "global", Limit: global, Global: true, DryRun: cfg.dryRun}
	}
	return ps, nil
}
