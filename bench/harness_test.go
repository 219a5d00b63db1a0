package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// small admits three requests per key per hour.
var small = limit{3, time.Hour}

// TestPeers checks each decision wrapper: with three requests an hour, a
// key gets three, the fourth is refused, and another key is unaffected.
func TestPeers(t *testing.T) {
	for _, p := range peers {
		t.Run(p.name, func(t *testing.T) {
			allow := p.new(t, small)
			for i := 1; i <= 3; i++ {
				if !allow("a") {
					t.Fatalf("request %d of key a refused, want allowed", i)
				}
			}
			if allow("a") {
				t.Fatal("request 4 of key a allowed, want refused")
			}
			if !allow("b") {
				t.Fatal("request 1 of key b refused, want allowed")
			}
		})
	}
}

// TestHTTPPeers checks each middleware: with one request an hour, a
// client's first request reaches the application, its second is answered
// 429, and another client is unaffected.
func TestHTTPPeers(t *testing.T) {
	for _, p := range httpPeers {
		if strings.HasSuffix(p.name, "none") {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			h := p.new(t, limit{1, time.Hour}, okHandler)
			rs := clients(2)
			for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, rs[0])
				if w.Code != want {
					t.Fatalf("request %d of client 0: status %d, want %d", i+1, w.Code, want)
				}
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, rs[1])
			if w.Code != http.StatusOK {
				t.Fatalf("request 1 of client 1: status %d, want %d", w.Code, http.StatusOK)
			}
		})
	}
}
