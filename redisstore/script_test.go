package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/internal/keyhash"
	"github.com/tokenfair/ratelimit/internal/storeerr"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// TestServerClock decides on the Redis server's own time.
func TestServerClock(t *testing.T) {
	s := newStore(t, redistest.Start(t).Client(), nil)
	ctx := context.Background()
	for i := range 10 {
		res, err := s.Take(ctx, slow, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed, "request %d", i+1)
	}
	res, err := s.Take(ctx, slow, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.InDelta(t, float64(10*time.Second), float64(res.RetryAfter), float64(time.Second))
}

// fakeScripter answers every script call with a fixed reply or error; it
// exercises the reply checks only.
type fakeScripter struct {
	redis.Scripter
	reply any
	err   error
}

func (f fakeScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	if f.err != nil {
		cmd.SetErr(f.err)
	} else {
		cmd.SetVal(f.reply)
	}
	return cmd
}

func (f fakeScripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return f.EvalSha(ctx, sha1, keys, args...)
}

func TestMalformedReplies(t *testing.T) {
	ok := []any{int64(1), int64(0), int64(200_000_000), int64(0), int64(0), int64(1_700_000_000), int64(0)} // allowed, ahead, credit, now
	for name, f := range map[string]fakeScripter{
		"error":        {err: errors.New("LOADING Redis is loading the dataset in memory")},
		"not an array": {reply: "OK"},
		"no group":     {reply: []any{}},
		"two groups":   {reply: []any{ok, ok}},
		"flat":         {reply: ok},
		"group error":  {reply: []any{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value")}},
		"group string": {reply: []any{"1"}},
		"short":        {reply: []any{[]any{int64(1), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"not integers": {reply: []any{[]any{"1", int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"bad flag":     {reply: []any{[]any{int64(7), int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"disagreement": {reply: []any{[]any{int64(0), int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"too long":     {reply: []any{[]any{int64(1), int64(0), int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"negative":     {reply: []any{[]any{int64(1), int64(-1), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"nanoseconds":  {reply: []any{[]any{int64(1), int64(0), int64(1_000_000_000), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"overflow":     {reply: []any{[]any{int64(0), int64(1 << 62), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
		"nil":          {reply: nil},
		"bad now":      {reply: []any{[]any{int64(1), int64(0), int64(0), int64(0), int64(0), int64(-1), int64(0)}}},
		"bad credit":   {reply: []any{[]any{int64(1), int64(0), int64(0), int64(0), int64(1_000_000_000), int64(1_700_000_000), int64(0)}}},
		"nested":       {reply: []any{[]any{[]any{int64(1)}, int64(0), int64(0), int64(0), int64(0), int64(1_700_000_000), int64(0)}}},
	} {
		s := newStore(t, f, &redisstore.Options{SkipContextTimeoutCheck: true})
		res, err := s.Take(context.Background(), policy, "k", 1)
		assert.Error(t, err, name)
		assert.Equal(t, ratelimit.Result{}, res, name)
		// Only a group's own error concerns one key; the rest is the store's.
		assert.Equal(t, name == "group error", errors.Is(err, storeerr.ErrKeyState), "%s: a key's state: %v", name, err)
	}
	// The same fake with a well-formed reply: the checks above fail for
	// their reasons, not for all replies.
	s := newStore(t, fakeScripter{reply: []any{ok}}, &redisstore.Options{SkipContextTimeoutCheck: true})
	res, err := s.Take(context.Background(), policy, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, int64(8), res.Remaining, "one token was spent before, one now")
}

// keyHash is the hash by which the errors and log lines of a key's state
// name the key: ratelimit.Event.KeyHash's, keyed per process.
func keyHash(key string) string { return fmt.Sprintf("%016x", keyhash.Sum(key)) }

// poison writes, under the store's default prefix and the policy
// "default", what another application sharing the prefix might: a hash
// for the key "poisoned" and a string that is no state for "garbage".
func poison(t *testing.T, srv *redistest.Server) {
	t.Helper()
	c := srv.Client()
	require.NoError(t, c.HSet(context.Background(), "ratelimit:default:poisoned", "f", "v").Err())
	require.NoError(t, c.Set(context.Background(), "ratelimit:default:garbage", "not-a-state", 0).Err())
}

// TestKeyStateStore: the store reports a key of another type, or a value
// that is no state, as an error wrapping storeerr.ErrKeyState that names
// the policy and the key's hash, never the key; with and without leases
// and batching, and for a TakeAll.
func TestKeyStateStore(t *testing.T) {
	srv := redistest.Start(t)
	poison(t, srv)
	p := &ratelimit.Policy{Name: "default", Limit: ratelimit.Per(100, time.Minute)}
	ctx := context.Background()
	for name, opts := range map[string]*redisstore.Options{
		"plain":       nil,
		"leases":      {Lease: 50 * time.Millisecond},
		"no batching": {NoBatching: true},
	} {
		s := newStore(t, srv.Client(), opts)
		for key, why := range map[string]string{"poisoned": "WRONGTYPE", "garbage": "no rate-limit state"} {
			for range 3 { // with leases, the second take asks for one
				_, err := s.Take(ctx, p, key, 1)
				require.ErrorIs(t, err, storeerr.ErrKeyState, "%s: %s", name, key)
				assert.ErrorContains(t, err, `policy "default" key hash `+keyHash(key), "%s: %s", name, key)
				assert.ErrorContains(t, err, why, "%s: %s", name, key)
				assert.NotContains(t, err.Error(), key, "%s: the key itself", name)
			}
		}
		res, err := s.Take(ctx, p, "other", 1)
		require.NoError(t, err, name)
		assert.True(t, res.Allowed, name)
	}
	s := newStore(t, srv.Client(), nil)
	global := &ratelimit.Policy{Name: "global", Limit: ratelimit.Per(100, time.Minute), Global: true}
	reqs := []ratelimit.BatchItem{{Policy: p, Key: "poisoned", Cost: 1}, {Policy: global, Key: "*", Cost: 1}}
	err := s.TakeAll(ctx, reqs, make([]ratelimit.Result, 2))
	require.ErrorIs(t, err, storeerr.ErrKeyState)
	assert.ErrorContains(t, err, `one of policy "default" key hash `+keyHash("poisoned")+`, policy "global" key hash `+keyHash("*"))
}

// TestKeyStateStaysPerKey: keys that another application wrote under the
// prefix (a hash, a string that is no state) fail their own requests with
// 503, the key's hash in the log, while every other key is still decided
// by Redis and the failover store stays healthy, in every mode. (Before,
// one such key degraded the store: in Open mode 20 of 20 requests of
// another client passed its 1/min limit.)
func TestKeyStateStaysPerKey(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			poison(t, srv)
			fo := newFailover(t, newStore(t, srv.Client(), nil), mode, nil)
			lim, err := ratelimit.New(fo, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
			require.NoError(t, err)
			var logs bytes.Buffer
			byClient := func(r *http.Request) (string, error) { return r.Header.Get("X-Client"), nil }
			mw, err := ratelimit.NewMiddleware(lim, byClient, &ratelimit.MiddlewareOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			require.NoError(t, err)
			get := func(client string) *httptest.ResponseRecorder {
				r := httptest.NewRequest(http.MethodGet, "/geocode?q=paris", nil)
				r.Header.Set("X-Client", client)
				w := httptest.NewRecorder()
				mw.Handle(w, r, func(*http.Request) (int, int64) { return http.StatusOK, 0 })
				return w
			}

			codes := map[string]map[int]int{"poisoned": {}, "garbage": {}, "c": {}}
			checked := 0 // answers to c with the fields of a decision of Redis
			for range 20 {
				for _, client := range []string{"poisoned", "garbage", "c"} {
					w := get(client)
					codes[client][w.Code]++
					if client == "c" && len(w.Header()["RateLimit"]) > 0 {
						checked++
					}
				}
			}
			assert.Equal(t, map[int]int{503: 20}, codes["poisoned"])
			assert.Equal(t, map[int]int{503: 20}, codes["garbage"])
			assert.Equal(t, map[int]int{200: 1, 429: 19}, codes["c"], "a 1/min limit")
			assert.Equal(t, 20, checked, "c's answers decided by Redis, of 20")
			assert.True(t, fo.Healthy())
			assert.Contains(t, logs.String(), "key hash "+keyHash("poisoned"), "the first 503 is logged")
			assert.NotContains(t, logs.String(), "poisoned")
		})
	}
}
