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

// During an outage every request fails the same way: the default error
// handler logs the first store failure, then one line per period with the number
// it left out; other 5xx errors are logged each time.
func TestStoreErrorsLoggedOncePerPeriod(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	a := errorAnswers{storeLines: &logSpacing{every: storeLinesEvery}, refusals: new(refusals)}

	down := fmt.Errorf("%w: connection refused", ErrStore)
	for range 100 {
		w := httptest.NewRecorder()
		a.answer(w, httptest.NewRequest("GET", "/", nil), down)
		assert.Equal(t, 503, w.Code, "every request is answered")
	}
	assert.Equal(t, 1, strings.Count(buf.String(), "connection refused"), buf.String())

	a.storeLines.next.Store(time.Now().UnixNano()) // the period is over
	a.answer(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), down)
	assert.Equal(t, 2, strings.Count(buf.String(), "connection refused"))
	assert.Contains(t, buf.String(), "suppressed=99")

	buf.Reset()
	for range 3 {
		a.answer(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), errors.New("boom"))
	}
	assert.Equal(t, 3, strings.Count(buf.String(), "boom"), "not a store failure: every one is logged")
}

// A Middleware's default error handler logs to its MiddlewareOptions.Logger and
// spaces its own lines: another Middleware's outage does not silence it.
func TestMiddlewareStoreErrorLinesAreItsOwn(t *testing.T) {
	var a, b bytes.Buffer
	ca, err := newConfig(&MiddlewareOptions{Logger: slog.New(slog.NewTextHandler(&a, nil))})
	assert.NoError(t, err)
	cb, err := newConfig(&MiddlewareOptions{Logger: slog.New(slog.NewTextHandler(&b, nil))})
	assert.NoError(t, err)
	down := fmt.Errorf("%w: connection refused", ErrStore)
	for range 10 {
		ca.OnError(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), down)
	}
	cb.OnError(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), down)
	assert.Equal(t, 1, strings.Count(a.String(), "connection refused"), a.String())
	assert.Equal(t, 1, strings.Count(b.String(), "connection refused"), b.String())
}
