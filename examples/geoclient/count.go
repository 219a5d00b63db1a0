package main

import (
	"net/http"
	"sync"
	"time"
)

// tally counts what the server answered one name: the requests sent for
// it, the 429s among the answers, and the last answer's status (0 if none).
// Only the goroutine geocoding the name touches it.
type tally struct {
	attempts, refused, status int
}

// tallyKey is the context key of a request's *tally.
type tallyKey struct{}

// counting is the base transport given to pace.New: it counts each request
// it sends in the request's tally, and tells waits that the request is no
// longer held while it is at the server.
type counting struct {
	base  *http.Transport
	waits *waits
}

// CloseIdleConnections closes the base's idle connections, for
// pace.Transport.CloseIdleConnections.
func (c *counting) CloseIdleConnections() { c.base.CloseIdleConnections() }

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.waits.add(-1)
	resp, err := c.base.RoundTrip(r)
	c.waits.add(1)
	if t, ok := r.Context().Value(tallyKey{}).(*tally); ok {
		t.attempts++
		if err == nil {
			t.status = resp.StatusCode
			if t.status == http.StatusTooManyRequests {
				t.refused++
			}
		}
	}
	return resp, err
}

// waits measures the wall-clock time during which at least one name is
// held: handed to the pacing transport and not at the server. It is safe
// for concurrent use.
type waits struct {
	mu    sync.Mutex
	held  int
	since time.Time     // when held last became 1
	sum   time.Duration // of the spans during which held was above 0
}

// add changes the number of names held by delta.
func (w *waits) add(delta int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if w.held == 0 {
		w.since = now
	}
	w.held += delta
	if w.held == 0 {
		w.sum += now.Sub(w.since)
	}
}

// total returns the time names were held, up to now.
func (w *waits) total() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.held > 0 {
		return w.sum + time.Since(w.since)
	}
	return w.sum
}
