package grpclimit_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/grpclimit"
	"github.com/tokenfair/ratelimit/memorystore"
	"github.com/tokenfair/ratelimit/nethttp"
)

// RPC handlers served over net/http (connect-go's, or grpc-go's
// Server.ServeHTTP) behind the HTTP middleware: OnDeny answers each
// refused caller in its own protocol, before reading its request.
func ExampleOnDeny() {
	store, _ := memorystore.New(nil)
	limiter, err := ratelimit.New(store, ratelimit.Policy{Name: "per-key", Limit: ratelimit.Per(1, time.Minute)})
	if err != nil {
		panic(err)
	}
	mw, err := ratelimit.NewMiddleware(limiter, ratelimit.KeyByAPIKey("X-API-Key"),
		&ratelimit.MiddlewareOptions{OnDeny: grpclimit.OnDeny, OnError: grpclimit.OnError})
	if err != nil {
		panic(err)
	}
	rpc := http.NewServeMux() // with connect-go: rpc.Handle(geocodingv1connect.NewGeocoderHandler(...))
	rpc.HandleFunc("POST /geocoding.v1.Geocoder/Geocode", func(w http.ResponseWriter, r *http.Request) {})
	handler := nethttp.Wrap(mw)(rpc)

	for _, contentType := range []string{"application/grpc", "application/grpc", "application/grpc-web+proto", "application/proto"} {
		r := httptest.NewRequest("POST", "/geocoding.v1.Geocoder/Geocode", http.NoBody)
		r.Header.Set("Content-Type", contentType)
		r.Header.Set("X-API-Key", "secret-key")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Printf("%s: %d", contentType, w.Code)
		if st := w.Header().Get("Grpc-Status"); st != "" {
			fmt.Printf(" grpc-status: %s grpc-message: %s", st, w.Header().Get("Grpc-Message"))
		}
		var connectError struct{ Code, Message string }
		if json.Unmarshal(w.Body.Bytes(), &connectError) == nil {
			fmt.Printf(" code: %s message: %s", connectError.Code, connectError.Message)
		}
		fmt.Println()
	}
	// Output:
	// application/grpc: 200
	// application/grpc: 200 grpc-status: 8 grpc-message: rate limited by policy per-key
	// application/grpc-web+proto: 200 grpc-status: 8 grpc-message: rate limited by policy per-key
	// application/proto: 429 code: resource_exhausted message: rate limited by policy per-key
}
