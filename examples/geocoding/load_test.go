package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tokenfair/ratelimit/redisstore/redistest"
)

// TestLoad drives a real demo server on loopback with concurrent clients,
// with the memory store and with Redis: no request fails, each client is
// admitted exactly its burst (the rate is too slow to refill during the
// run), and the latency the limiter adds is measured against the same
// server with the limiter skipped (-skip-path). LOAD_REQUESTS sets the
// number of requests per run (default 4000); ./scripts/load runs it longer
// and records the figures in BENCHMARKS.md.
func TestLoad(t *testing.T) {
	n := 4000
	if v := os.Getenv("LOAD_REQUESTS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	const clients, workers = 50, 16
	burst := n / clients / 2 // half of each client's requests pass
	redis := redistest.Start(t)
	var rows []string
	for _, store := range []string{"memory", "redis"} {
		args := []string{"-rate", "0.001", "-burst", strconv.Itoa(burst), "-store", store, "-redis-url", "redis://" + redis.Addr + "/0"}
		base := load(t, n, clients, workers, startServer(t, append(args, "-skip-path", "/geocode")...))
		limited := load(t, n, clients, workers, startServer(t, args...))
		assert.Zero(t, base.errors+limited.errors, "%s: failed requests", store)
		assert.Equal(t, n, base.codes[200], "%s: the skipped limiter refuses nothing", store)
		assert.Equal(t, map[int]int{200: clients * burst, 429: n - clients*burst}, limited.codes, "%s: exactly the burst of every client passes", store)
		rows = append(rows, fmt.Sprintf("| %s | %d | %v | %v | %v | %v | %v | %v |", store, n,
			base.p(50), limited.p(50), limited.p(50)-base.p(50), base.p(99), limited.p(99), limited.p(99)-base.p(99)))
	}
	t.Logf("\n| store | requests | p50 skipped | p50 limited | added | p99 skipped | p99 limited | added |\n|---|---|---|---|---|---|---|---|\n%s",
		rows[0]+"\n"+rows[1])
	http.DefaultClient.CloseIdleConnections()
}

type loadResult struct {
	codes     map[int]int
	errors    int
	latencies []time.Duration
}

func (r loadResult) p(q int) time.Duration {
	return r.latencies[(len(r.latencies)-1)*q/100].Round(time.Microsecond)
}

// load sends n GET /geocode requests from workers goroutines, spread over
// clients API keys, and collects statuses and latencies.
func load(t *testing.T, n, clients, workers int, base string) loadResult {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: workers}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	res := loadResult{codes: map[int]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := range n {
		next <- i
	}
	close(next)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				req, _ := http.NewRequest("GET", base+"/geocode?q=paris", nil)
				req.Header.Set("X-API-Key", "client-"+strconv.Itoa(i%clients))
				start := time.Now()
				resp, err := c.Do(req)
				elapsed := time.Since(start)
				mu.Lock()
				if err != nil {
					res.errors++
				} else {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					res.codes[resp.StatusCode]++
					res.latencies = append(res.latencies, elapsed)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(res.latencies)
	return res
}
