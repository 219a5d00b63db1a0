package storetest

import (
	"math"
	"time"

	"github.com/tokenfair/ratelimit"
)

// The model test's rules: one bucket as docs/algorithms.md states it,
// written from that page rather than from the code.

// stepOf returns the time a token of l takes and the time l decides at, at
// now: now for a rate; for a calendar quota, 1 ns and the end of its
// period.
func stepOf(l ratelimit.Limit, now int64) (iv, at int64) {
	if iv := int64(l.Interval()); iv > 0 {
		return iv, now
	}
	return 1, periodAt(l, now)
}

// periodAt returns the time l decides at, at now.
func periodAt(l ratelimit.Limit, now int64) int64 {
	if l.Interval() > 0 {
		return now
	}
	_, end := l.Period(time.Unix(0, now))
	return end.UnixNano()
}

// decide is the token bucket of docs/algorithms.md for a bucket of state
// s (the time it is full again) under l at now, for cost > 0: allowed iff
// the time to full plus the cost fits in the burst; a calendar quota
// decides at its period's end with 1 ns a token, and its waits run to the
// reset. Sums and products saturate at the int64 limit.
func decide(l ratelimit.Limit, s, now, cost int64) (allowed bool, remaining, retry, reset, next int64) {
	iv, at := stepOf(l, now)
	tau := l.Burst() * iv
	ahead := max(s-at, 0)
	next = s
	need := satMul(cost, iv)
	switch {
	case cost <= l.Burst() && ahead <= tau-need:
		allowed, ahead = true, ahead+need
		next = at + ahead
	case cost <= l.Burst():
		retry = satAdd(ahead, need-tau)
	}
	if ahead < tau {
		remaining = (tau - ahead) / iv
	}
	reset = ahead
	if l.Interval() == 0 {
		reset = at - now
		if retry > 0 {
			retry = reset
		}
	}
	return allowed, remaining, retry, reset, next
}

// owe is a charge past empty of cost to a bucket of state s under l at
// now: the state moves on by the cost, exactly, never back; a calendar
// quota's to at most 2n past its period's end.
func owe(l ratelimit.Limit, s, now, cost int64) int64 {
	iv, at := stepOf(l, now)
	limit := int64(math.MaxInt64)
	if l.Interval() == 0 {
		limit = at + 2*l.Burst()
	}
	return max(s, min(satAdd(max(s, at), satMul(cost, iv)), limit))
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
