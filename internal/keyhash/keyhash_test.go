package keyhash

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSum(t *testing.T) {
	assert.Equal(t, uint64(0), Sum(""), "no key")
	assert.Equal(t, Sum("ip:203.0.113.7"), Sum("ip:203.0.113.7"), "stable in a process")
	assert.NotEqual(t, Sum("ip:203.0.113.7"), Sum("ip:203.0.113.8"))
	assert.NotEqual(t, uint64(0), Sum("a"))
}
