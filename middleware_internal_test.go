package ratelimit

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// During an outage every request fails the same way: DefaultErrorHandler
// logs the first store failure, then one line per period with the number
// it left out; other 5xx errors are logged each time.
func TestStoreErrorsLoggedOncePerPeriod(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	storeErrorLines.next.Store(0)
	storeErrorLines.suppressed.Store(0)

	down := fmt.Errorf("%w: connection refused", ErrStore)
	for range 100 {
		w := httptest.NewRecorder()
		DefaultErrorHandler(w, httptest.NewRequest("GET", "/", nil), down)
		assert.Equal(t, 503, w.Code, "every request is answered")
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "connection refused"), buf.String())

	storeErrorLines.next.Store(time.Now().UnixNano()) // the period is over
	DefaultErrorHandler(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), down)
	assert.Equal(t, 2, strings.Count(buf.String(), "connection refused"))
	assert.Contains(t, buf.String(), "suppressed=99")

	buf.Reset()
	for range 3 {
		DefaultErrorHandler(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), errors.New("boom"))
	}
	assert.Equal(t, 3, strings.Count(buf.String(), "boom"), "not a store failure: every one is logged")
}
