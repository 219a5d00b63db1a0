package ratelimit

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestLimitConstructors(t *testing.T) {
	for _, tc := range []struct {
		got  Limit
		want Limit
		str  string
	}{
		{PerSecond(5), Limit{200 * time.Millisecond, 5}, "5/s burst 5"},
		{PerSecond(5).WithBurst(10), Limit{200 * time.Millisecond, 10}, "5/s burst 10"},
		{PerSecond(3), Limit{333333333, 3}, "1 every 333.333333ms burst 3"},
		{PerMinute(100), Limit{600 * time.Millisecond, 100}, "100/min burst 100"},
		{PerHour(1000), Limit{3600 * time.Millisecond, 1000}, "1000/h burst 1000"},
		{PerDay(10000), Limit{8640 * time.Millisecond, 10000}, "10000/d burst 10000"},
		{Per(2, 3*time.Second), Limit{1500 * time.Millisecond, 2}, "40/min burst 2"},
		{Per(3, 2), Limit{1, 3}, "1000000000/s burst 3"}, // 2ns/3 rounds to 1ns
		{Every(7 * time.Second), Limit{7 * time.Second, 1}, "1 every 7s burst 1"},
		{Rate(5), Limit{200 * time.Millisecond, 5}, "5/s burst 5"},
		{Rate(0.5), Limit{2 * time.Second, 1}, "30/min burst 1"},
		{Rate(2.5), Limit{400 * time.Millisecond, 2}, "150/min burst 2"},
		{Rate(1e9), Limit{1, 1e9}, "1000000000/s burst 1000000000"},
	} {
		assert.Equal(t, tc.want, tc.got)
		assert.Equal(t, tc.str, tc.got.String())
		assert.NoError(t, tc.got.Validate(), "%v", tc.got)
	}
}

func TestLimitValidate(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		want string
	}{
		{Limit{}, "rate must be positive"},
		{PerSecond(0), "rate must be positive"},
		{PerSecond(-5), "rate must be positive"},
		{Per(5, -time.Second), "rate must be positive"},
		{Rate(0), "rate must be positive"},
		{Rate(-1), "rate must be positive"},
		{Rate(math.NaN()), "rate must be positive"},
		{Rate(math.Inf(1)), "rate must be positive"},
		{Rate(math.Inf(-1)), "rate must be positive"},
		{PerSecond(5).WithBurst(0), "burst must be at least 1"},
		{PerSecond(5).WithBurst(-1), "burst must be at least 1"},
		{Rate(1e-12), "exceeds"},
		{Every(time.Hour).WithBurst(1 << 40), "exceeds"},
		{Every(math.MaxInt64), "exceeds"},
	} {
		err := tc.l.Validate()
		if assert.ErrorIs(t, err, ErrInvalidLimit, "%#v", tc.l) {
			assert.Contains(t, err.Error(), tc.want)
		}
	}
	assert.NoError(t, Every(MaxSpan).Validate(), "exactly MaxSpan is allowed")
}

func TestAlgorithmNames(t *testing.T) {
	a, err := ParseAlgorithm("token-bucket")
	assert.NoError(t, err)
	assert.Equal(t, TokenBucket, a)
	assert.Equal(t, "token-bucket", a.String())
	_, err = ParseAlgorithm("fixed-window")
	assert.ErrorContains(t, err, `"fixed-window"`)
	assert.Equal(t, "Algorithm(9)", Algorithm(9).String())
}
