package main

import "github.com/tokenfair/ratelimit"

// simulator replays requests against one policy. Every decision is
// Policy.Decide's, the function the library's stores call; the simulator only
// keeps each key's state and counts. Its memory grows with the number of
// keys, not of requests.
type simulator struct {
	policy  ratelimit.Policy
	empty   bool  // -start empty
	epoch   int64 // Unix nanoseconds of time 0 for a calendar quota; 0 for a rate
	initial int64 // state of a key when first seen
	keys    map[string]*keyState
	total   keyStats
	last    int64 // time of the latest request

	plot      map[string]*series // the keys to draw, nil for no picture
	plotOrder []string           // the same keys, in the order to draw them
}

// keyState is what the simulator holds for one key.
type keyState struct {
	name   string
	state  int64
	stats  keyStats
	series *series // nil unless the key is plotted
}

// newSimulator returns a simulator for p. With empty set, every key's
// bucket is empty at time 0 (see emptyState and quotaStart); otherwise it
// is full. For a calendar quota, epoch is the Unix time of time 0, in
// nanoseconds; for a rate, 0.
func newSimulator(p ratelimit.Policy, empty bool, epoch int64) *simulator {
	s := &simulator{policy: p, empty: empty, keys: make(map[string]*keyState)}
	s.begin(epoch)
	return s
}

// begin sets the Unix time of time 0, and so the state of a key when first
// seen; for a calendar quota replaying an access log, it is the first
// line's timestamp, known once that line is read.
func (s *simulator) begin(epoch int64) {
	s.epoch = epoch
	switch {
	case isQuota(s.policy):
		s.initial = quotaStart(s.policy, s.empty, epoch)
	case s.empty:
		s.initial = emptyState(s.policy)
	}
}

// emptyState is the state at time 0 of a bucket that has no room: for the
// token bucket and the policing leaky bucket, no tokens (the bucket is full
// again at Burst × Interval); for the shaping queue, no room for even one
// more request (the queue drains at (Burst + 1) × Interval, since a queue
// with a wait of up to Burst × Interval still admits one). These are the
// states the library leaves after a drain at time 0: Take(Burst), plus
// Take(1) for the shaping queue. From then on the bucket refills as any
// other, so a key first seen at time t has min(⌊t / Interval⌋, Burst)
// tokens (or places in the queue).
func emptyState(p ratelimit.Policy) int64 {
	iv := int64(p.Limit.Interval())
	span := p.Limit.Burst() * iv
	if p.Algorithm == ratelimit.LeakyShape {
		return span + iv
	}
	return span
}

// key returns the state of key, adding it if it is new.
func (s *simulator) key(key []byte) *keyState {
	ks, ok := s.keys[string(key)]
	if !ok {
		name := string(key)
		ks = &keyState{name: name, state: s.initial, series: s.plot[name]}
		s.keys[name] = ks
	}
	return ks
}

// take decides one request and returns its key's state and the result.
func (s *simulator) take(req *request) (*keyState, ratelimit.Result) {
	ks := s.key(req.key)
	before := ks.state
	res, after := s.policy.Decide(before, s.epoch+req.t, req.cost)
	ks.state = after
	ks.stats.add(res.Allowed)
	s.total.add(res.Allowed)
	s.last = req.t
	if ks.series != nil {
		ks.series.add(req.t, before, after, res.Allowed)
	}
	return ks, res
}

// plotSpec returns what the picture shows: the keys to draw, in order.
func (s *simulator) plotSpec(empty bool) plotSpec {
	spec := plotSpec{policy: s.policy, empty: empty, initial: s.initial, last: s.last}
	for _, k := range s.plotOrder {
		pn := panel{key: k, series: s.plot[k]}
		if ks := s.keys[k]; ks != nil {
			pn.stats = ks.stats
		}
		spec.panels = append(spec.panels, pn)
	}
	return spec
}
