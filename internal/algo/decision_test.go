package algo

// Decision is the outcome of one algorithm step, in nanoseconds: the tests'
// view of tokenBucket's and shape's results.
type Decision struct {
	Allowed    bool
	State      int64 // state to store; the input state when refused
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
	Delay      int64
}

// TokenBucket is tokenBucket with its results in a Decision.
func TokenBucket(state, now, interval, burst, cost int64) Decision {
	var d Decision
	d.Allowed, d.State, d.Remaining, d.RetryAfter, d.ResetAfter = tokenBucket(state, now, interval, burst, cost)
	return d
}

// Shape is shape with its results in a Decision.
func Shape(state, now, interval, burst, cost, bound, immediate int64) Decision {
	var d Decision
	d.Allowed, d.State, d.Remaining, d.RetryAfter, d.ResetAfter, d.Delay = shape(state, now, interval, burst, cost, bound, immediate)
	return d
}
