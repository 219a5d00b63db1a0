package ratelimit

import (
	"errors"
	"flag"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAlgorithmText(t *testing.T) {
	for a, name := range map[Algorithm]string{TokenBucket: "token-bucket", LeakyPolice: "leaky-police", LeakyShape: "leaky-shape"} {
		assert.Equal(t, name, a.name())
		text, err := a.MarshalText()
		require.NoError(t, err, "%v.MarshalText()", a)
		assert.Equal(t, name, string(text))
		got := Algorithm(99)
		require.NoError(t, got.UnmarshalText(text), "UnmarshalText(%q)", text)
		assert.Equal(t, a, got, "UnmarshalText(%q)", text)
	}
	assert.Equal(t, "Algorithm(9)", Algorithm(9).name())
	_, err := Algorithm(9).MarshalText()
	assert.ErrorContains(t, err, "unknown algorithm 9")

	for _, bad := range []string{"fixed-window", "", "Token-Bucket", " token-bucket", "Algorithm(9)"} {
		a := LeakyShape
		err := a.UnmarshalText([]byte(bad))
		if assert.Error(t, err, "UnmarshalText(%q)", bad) {
			assert.Contains(t, err.Error(), `"`+bad+`"`)
			assert.Contains(t, err.Error(), `"token-bucket" "leaky-police" "leaky-shape"`, "the error lists the valid names")
		}
		assert.Equal(t, LeakyShape, a, "a failed UnmarshalText(%q) changes nothing", bad)
	}
}

func TestAlgorithmFlag(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var a Algorithm
	fs.TextVar(&a, "algorithm", LeakyPolice, "how the limit is applied")
	assert.Equal(t, LeakyPolice, a, "the default")
	assert.Equal(t, "leaky-police", fs.Lookup("algorithm").DefValue)
	require.NoError(t, fs.Parse([]string{"-algorithm", "leaky-shape"}))
	assert.Equal(t, LeakyShape, a)

	err := fs.Parse([]string{"-algorithm=sliding-window"})
	if assert.Error(t, err) {
		assert.Contains(t, err.Error(), `"sliding-window"`)
		assert.Contains(t, err.Error(), "token-bucket")
	}
}

// Every error that New returns for a policy names the value at fault.
func TestPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{Name: `a"b`, Limit: PerSecond(1)}, `policy name "a\"b"`},
		{Policy{Name: string(make([]byte, 65)), Limit: PerSecond(1)}, "want 1 to 64 characters"},
		{Policy{Limit: PerSecond(1), Algorithm: 42}, "unknown algorithm 42"},
		{Policy{Limit: PerSecond(1), Immediate: 1}, "apply to leaky-shape only"},
		{Policy{Limit: PerSecond(1), MaxDelay: time.Second}, "apply to leaky-shape only"},
		{Policy{Limit: PerSecond(1), Algorithm: LeakyShape, Immediate: 2}, "Immediate 2 outside [0, burst 1]"},
		{Policy{Limit: PerSecond(1), Algorithm: LeakyShape, MaxDelay: 2 * time.Second}, "MaxDelay 2s outside [0, 1s]"},
	} {
		_, err := New(nopStore{}, tc.p)
		assert.ErrorContains(t, err, tc.want, "New(%+v)", tc.p)
		assert.False(t, errors.Is(err, ErrBadRequest), "a configuration error is no request's fault")
	}
}

// New refuses a calendar quota that is invalid or that the policy cannot
// apply, naming the policy, the value at fault and what is wanted.
func TestQuotaPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		want []string
	}{
		{Policy{Name: "daily", Limit: Daily(10, nil)}, []string{`policy "daily"`, "Daily(10, nil)", "a nil *time.Location"}},
		{Policy{Name: "monthly", Limit: Monthly(0, time.UTC)}, []string{`policy "monthly"`, `Monthly(0, "UTC")`, "from 1 to 1000000000000"}},
		{Policy{Limit: Daily(10, time.UTC).WithBurst(1e13)}, []string{`policy "default"`, `Daily(10000000000000, "UTC")`, "from 1 to 1000000000000"}},
		{Policy{Limit: Daily(10, time.UTC), Algorithm: LeakyShape}, []string{`policy "default"`, "a calendar quota is a TokenBucket's, not a leaky-shape's"}},
		{Policy{Limit: Monthly(10, time.UTC), Algorithm: LeakyPolice}, []string{"a calendar quota is a TokenBucket's, not a leaky-police's"}},
		{Policy{Limit: Daily(10, time.UTC), Immediate: 1}, []string{`policy "default"`, "Immediate and MaxDelay apply to leaky-shape only"}},
		{Policy{Limit: Daily(10, time.UTC), MaxDelay: time.Second}, []string{"Immediate and MaxDelay apply to leaky-shape only"}},
		{Policy{Limit: Daily(10, time.UTC), Algorithm: LeakyShape, MaxDelay: time.Second}, []string{"not a leaky-shape's"}},
	} {
		_, err := New(nopStore{}, tc.p)
		if assert.Error(t, err, "New(%+v)", tc.p) {
			for _, want := range tc.want {
				assert.Contains(t, err.Error(), want, "New(%+v)", tc.p)
			}
			assert.False(t, errors.Is(err, ErrBadRequest), "a configuration error is no request's fault")
		}
	}
	for _, l := range []Limit{Daily(1, time.UTC), Monthly(maxQuota, time.UTC), Daily(10, time.UTC).WithBurst(20)} {
		_, err := New(nopStore{}, Policy{Limit: l})
		assert.NoError(t, err, "New(Policy{Limit: %v})", l)
	}
}
