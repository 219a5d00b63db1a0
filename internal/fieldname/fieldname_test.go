package fieldname

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSpellings: each name's Canonical is what http.Header keys its Draft
// by, and its Metadata is the Draft in lower case, as gRPC keys it.
func TestSpellings(t *testing.T) {
	for _, n := range All {
		assert.Equal(t, http.CanonicalHeaderKey(n.Draft), n.Canonical, n.Draft)
		assert.Equal(t, strings.ToLower(n.Draft), n.Metadata, n.Draft)
	}
	assert.Equal(t, "RateLimit-Remaining", Legacy[Remaining].Draft)
	assert.Equal(t, "X-RateLimit-Reset", X[Reset].Draft)
}
