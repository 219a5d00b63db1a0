package redisstore

import (
	"strings"
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

func TestShortKey(t *testing.T) {
	short := strings.Repeat("k", maxRawKey)
	assert.Equal(t, short, shortKey(short), "a key up to maxRawKey is kept as it is")
	long := strings.Repeat("k", 100_000)
	h := shortKey(long)
	assert.Len(t, h, 1+43, "# and a base64url SHA-256")
	assert.Equal(t, h, shortKey(long), "the same key, the same name")
	assert.NotEqual(t, h, shortKey(long+"x"))
	assert.NotContains(t, h, "kkkk")

	tagged := "{tenant-7}" + long
	assert.True(t, strings.HasPrefix(shortKey(tagged), "{tenant-7}#"))
	assert.Equal(t, slotOf("rl:api:"+tagged), slotOf("rl:api:"+shortKey(tagged)), "the hash tag still picks the slot")
	assert.Equal(t, slotOf("rl:api:"+"{tenant-7}x"), slotOf("rl:api:"+shortKey(tagged)))
}
