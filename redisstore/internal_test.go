package redisstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSlotOf(t *testing.T) {
	// Vectors from the Redis Cluster specification and redis-cli CLUSTER KEYSLOT.
	assert.Equal(t, 12182, slotOf("foo"))
	assert.Equal(t, 5061, slotOf("bar"))
	assert.Equal(t, 12739, slotOf("123456789"))
	assert.Equal(t, slotOf("user1000"), slotOf("{user1000}.following"))
	assert.Equal(t, slotOf("{user1000}.following"), slotOf("{user1000}.followers"))
	assert.Equal(t, slotOf("foo{}{bar}"), slotOf("foo{}{bar}"), "an empty tag hashes the whole key")
	assert.NotEqual(t, slotOf("bar"), slotOf("foo{}{bar}"))
	assert.Equal(t, slotOf("{bar"), slotOf("{bar"))
}
