package ratelimit_test

import (
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit"
)

// observedHash returns the Event.KeyHash of a request from addr through a
// new Middleware keyed by KeyByIP.
func observedHash(t *testing.T, addr string) uint64 {
	t.Helper()
	byIP, err := ratelimit.KeyByIP(nil)
	require.NoError(t, err)
	var got uint64
	h := newHarness(t, setup{limit: ratelimit.PerSecond(5), key: byIP, opts: &ratelimit.MiddlewareOptions{Observe: func(_ *http.Request, e ratelimit.Event) { got = e.KeyHash }}})
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = addr + ":4000"
	h.handle(r)
	require.NotZero(t, got, "the request had a key")
	return got
}

// Within a process a key has one Event.KeyHash, in every Middleware; two
// keys have two.
func TestKeyHashStableInProcess(t *testing.T) {
	a := observedHash(t, "203.0.113.77")
	assert.Equal(t, a, observedHash(t, "203.0.113.77"), "another Middleware, the same hash")
	assert.NotEqual(t, a, observedHash(t, "203.0.113.78"))
}

// Another process gives the same key another Event.KeyHash: its seed is
// made per process.
func TestKeyHashPerProcess(t *testing.T) {
	if os.Getenv("RATELIMIT_KEYHASH_CHILD") == "1" {
		fmt.Printf("keyhash=%d\n", observedHash(t, "203.0.113.77"))
		return
	}
	child := func() uint64 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKeyHashPerProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "RATELIMIT_KEYHASH_CHILD=1")
		out, err := cmd.Output()
		require.NoError(t, err, "%s", out)
		_, after, ok := strings.Cut(string(out), "keyhash=")
		require.True(t, ok, "the child's output: %s", out)
		h, err := strconv.ParseUint(strings.Fields(after)[0], 10, 64)
		require.NoError(t, err)
		return h
	}
	one, two := child(), child()
	mine := observedHash(t, "203.0.113.77")
	assert.NotEqual(t, mine, one, "this process and another")
	assert.NotEqual(t, one, two, "two other processes")
}

// A reader of the logs who sees the Event.KeyHash of an IP key cannot find
// the address by hashing every address of its /24 with the public
// functions: KeyByIP's key of each, hashed by FNV-1a (the unkeyed hash
// KeyHash was) or by hash/maphash under a seed of its own.
func TestKeyHashNotEnumerable(t *testing.T) {
	seen := observedHash(t, "203.0.113.77")
	byIP, err := ratelimit.KeyByIP(nil)
	require.NoError(t, err)
	guess := maphash.MakeSeed()
	found := []string{}
	for i := range 256 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113." + strconv.Itoa(i) + ":4000"
		key, err := byIP(r)
		require.NoError(t, err)
		f := fnv.New64a()
		f.Write([]byte(key))
		if f.Sum64() == seen || maphash.String(guess, key) == seen {
			found = append(found, key)
		}
	}
	assert.Empty(t, found, "the addresses whose hash is the observed one")
}
