package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/tokenfair/ratelimit"
)

// batchPath is the batch endpoint: POST a body of place names, one per
// line, and get back the places found.
const batchPath = "/geocode/batch"

// maxBatchNames is the most names a batch may hold, and maxBatchBody the
// largest body: 100 names of the longest spellings, with room to spare.
const (
	maxBatchNames = 100
	maxBatchBody  = 64 << 10
)

// batch is the body of a POST /geocode/batch, read once: its names, one
// per line that is not blank.
type batch struct{ names []string }

// batchKey is the context key of a request's batch.
type batchKey struct{}

// batchOf returns the batch of the request of ctx, or nil.
func batchOf(ctx context.Context) *batch {
	b, _ := ctx.Value(batchKey{}).(*batch)
	return b
}

// withBatches returns next behind the reading of batch bodies, in front of
// every router: the body of a POST /geocode/batch is read, at most
// maxBatchBody bytes, and its names go to the limiter, which reserves one
// token per name (batchCost), and to the handler, in the request's
// context. A body that holds no name, more than maxBatchNames or more
// than maxBatchBody bytes is answered 400 before the limiter sees it: no
// token is taken.
func withBatches(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != batchPath {
			next.ServeHTTP(w, r)
			return
		}
		data, err := io.ReadAll(io.LimitReader(r.Body, maxBatchBody+1))
		var names []string
		switch {
		case err != nil:
			writeProblem(w, http.StatusBadRequest, "the body could not be read")
			return
		case len(data) > maxBatchBody:
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("the body is larger than %d bytes; a batch holds at most %d names, one per line", maxBatchBody, maxBatchNames))
			return
		}
		if names = batchNames(string(data)); len(names) == 0 {
			writeProblem(w, http.StatusBadRequest, "the body holds no place name; send one per line")
			return
		} else if len(names) > maxBatchNames {
			writeProblem(w, http.StatusBadRequest, fmt.Sprintf("a batch holds at most %d names; this one has more", maxBatchNames))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), batchKey{}, &batch{names: names}))
		r.Body = io.NopCloser(bytes.NewReader(data))
		next.ServeHTTP(w, r)
	})
}

// batchNames returns the names of body, one per line that is not blank,
// each as written but for the CR of a CRLF, stopping past maxBatchNames.
func batchNames(body string) []string {
	var names []string
	for line := range strings.Lines(body) {
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if names = append(names, line); len(names) > maxBatchNames {
			break
		}
	}
	return names
}

// batchCost is the Middleware's cost of r: one token per name of a batch,
// else 1.
func batchCost(r *http.Request) (int64, error) {
	if b := batchOf(r.Context()); b != nil {
		return int64(len(b.names)), nil
	}
	return 1, nil
}

// geocodeBatch answers POST /geocode/batch with, in order, the result of
// GET /geocode for each place of the batch that is found, and settles the
// batch's cost at one token per place found, and never less than one: the
// tokens of the names not found go back, but a batch that finds nothing
// still costs one token. A settlement that fails is logged: the batch
// keeps its whole cost.
func geocodeBatch(logger *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b := batchOf(r.Context())
		if b == nil { // not behind withBatches
			writeProblem(w, http.StatusInternalServerError, "the batch was not read")
			return
		}
		found := make([]geocodeResult, 0, len(b.names))
		for _, name := range b.names {
			if p, ok := lookup(name); ok {
				found = append(found, geocodeResult{Query: name, Name: p.Name, Lat: p.Lat, Lon: p.Lon})
			}
		}
		cost := max(int64(len(found)), 1) // Contract 1: a batch that finds nothing costs one
		if err := ratelimit.Settle(r.Context(), "requests", cost); err != nil {
			logger.Warn("geocoding: a batch's unused tokens could not be given back", "names", len(b.names), "found", len(found), "err", err)
		}
		writeJSON(w, http.StatusOK, "application/json", found)
	}
}

// batchMethodNotAllowed answers a request to the batch endpoint that is
// not a POST.
func batchMethodNotAllowed(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Allow", http.MethodPost)
	writeProblem(w, http.StatusMethodNotAllowed, "only POST is allowed")
}
