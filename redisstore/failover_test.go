package redisstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/failover"
	"github.com/tokenfair/ratelimit/internal/keyhash"
	"github.com/tokenfair/ratelimit/internal/storeerr"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/redisstore"
	"github.com/tokenfair/ratelimit/redisstore/redistest"
	"github.com/tokenfair/ratelimit/storetest"
)

var modes = []failover.Mode{failover.Open, failover.Closed, failover.Local}

// newFailover returns a failover store of mode over primary, with a
// memorystore as its Local store and clock as its probe schedule's.
func newFailover(t *testing.T, primary ratelimit.Store, mode failover.Mode, clock func() time.Time) *failover.Store {
	t.Helper()
	local, err := memorystore.New(nil)
	require.NoError(t, err)
	fo, err := failover.New(primary, &failover.Options{Mode: mode, Local: local, Clock: clock,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return fo
}

// TestFailoverRecoversDespiteCanceledRequests: Redis is killed and
// restarted, and every request that would probe it is preceded by one
// whose context has already ended (as an HTTP/2 client's HEADERS and
// RST_STREAM sent together give). Such a request learns nothing of Redis
// and hands the probe on, so the next request probes and the store
// recovers at once, in every mode. (Before, the canceled requests took
// every probe: 0 of 200 requests were decided by Redis again, and in Open
// mode a 1/min client got 200 of 200 through.)
func TestFailoverRecoversDespiteCanceledRequests(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			clock := new(storetest.Clock)
			fo := newFailover(t, newStore(t, srv.Client(), &redisstore.Options{Timeout: callTimeout}), mode, clock.Now)
			lim, err := ratelimit.New(fo, ratelimit.Policy{Limit: ratelimit.Per(1, time.Minute)})
			require.NoError(t, err)
			_, err = lim.Take(ctx, "warm-up", 1)
			require.NoError(t, err)

			srv.Kill()
			_, _ = lim.Take(ctx, "c", 1)
			require.False(t, fo.Healthy())
			srv.Restart()

			checked, admitted := 0, 0
			for range 200 {
				clock.Advance(250 * time.Millisecond) // a probe is due
				_, _ = lim.Take(canceled, "c", 1)     // healthy, the refusal cache may answer it
				res, err := lim.Take(ctx, "c", 1)
				if err == nil && !res.Degraded {
					checked++
				}
				if err == nil && res.Allowed {
					admitted++
				}
			}
			assert.Equal(t, 200, checked, "requests decided by Redis, of 200")
			assert.Equal(t, 1, admitted, "admitted through a 1/min limit, of 200")
			assert.True(t, fo.Healthy())
		})
	}
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
		"plain":    nil,
		"leases":   {Lease: 50 * time.Millisecond},
		"batching": {Batching: true},
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
				mw.Handle(w, r, func(*http.Request) int { return http.StatusOK })
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
