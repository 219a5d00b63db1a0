package nethttp

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/memorystore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMiddlewareCallsNextOnlyWhenAdmitted(t *testing.T) {
	store, err := memorystore.New(memorystore.WithSweepInterval(0))
	require.NoError(t, err)
	lim, err := ratelimit.New(store, ratelimit.Policy{Limit: ratelimit.PerMinute(2)})
	require.NoError(t, err)
	m, err := ratelimit.NewMiddleware(lim, func(r *http.Request) (string, error) { return r.URL.Query().Get("u"), nil })
	require.NoError(t, err)
	calls := 0
	h := Middleware(m)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.WriteHeader(http.StatusAccepted)
	}))
	var codes []int
	for _, u := range []string{"a", "a", "a", "b", ""} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/?u="+u, nil))
		codes = append(codes, w.Code)
	}
	assert.Equal(t, []int{202, 202, 429, 202, 500}, codes)
	assert.Equal(t, 3, calls)
}
