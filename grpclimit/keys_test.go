package grpclimit_test

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/tokenfair/ratelimit"
	"github.com/tokenfair/ratelimit/grpclimit"
)

func TestKeyByMethodPaths(t *testing.T) {
	for _, tc := range []struct {
		path, want string
	}{
		{"/pkg.Service/Method", "/pkg.Service/Method"},
		{"/geocoding.v1.Geocoder/Geocode", "/geocoding.v1.Geocoder/Geocode"},
		{"/Service/M", "/Service/M"},
		{"/", ""},
		{"/geocode", ""},
		{"//Method", ""},
		{"/pkg.Service/", ""},
		{"/pkg.Service/Method/more", ""},
		{"pkg.Service/Method", ""},
	} {
		r := &http.Request{Method: "POST", URL: &url.URL{Path: tc.path}}
		got, err := grpclimit.KeyByMethod(r)
		if tc.want == "" {
			assert.True(t, errors.Is(err, ratelimit.ErrBadRequest), "KeyByMethod(%q) error = %v, want ErrBadRequest", tc.path, err)
			assert.Empty(t, got)
			continue
		}
		assert.NoError(t, err, "KeyByMethod(%q)", tc.path)
		assert.Equal(t, tc.want, got, "KeyByMethod(%q)", tc.path)
	}
}
