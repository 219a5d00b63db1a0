package redisstore

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"

	"github.com/tokenfair/ratelimit"
)

// key returns the name of the Redis key of r's bucket.
func (s *Store) key(r ratelimit.BatchItem) string {
	return s.prefix + r.Policy.Name + ":" + shortKey(r.Key)
}

// maxRawKey is the longest client key kept as it is in a Redis key name.
const maxRawKey = 128

// shortKey returns key, or for a key longer than maxRawKey (a 100 kB header
// from a custom key function, say) "#" and its SHA-256 in base64url, after
// its hash tag ("{tag}") if it has one, so that a Redis Cluster still puts it
// in the slot its tag chooses. Redis never holds long or raw secrets that a
// key function forgot to hash.
func shortKey(key string) string {
	if len(key) <= maxRawKey {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	h := "#" + base64.RawURLEncoding.EncodeToString(sum[:])
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 && j <= maxRawKey {
			h = key[i:i+j+2] + h
		}
	}
	return h
}

// slotsKey returns the name of the sorted set of key's in-flight slots
// (see Acquire). Policy names are never empty, so no bucket's key starts
// with PREFIX + ":".
func (s *Store) slotsKey(key string) string { return s.prefix + ":inflight:" + shortKey(key) }

// slotOf returns the Redis Cluster slot of key: CRC16 (XMODEM) of the key,
// or of its hash tag (the text between the first "{" and the next "}", if
// not empty), modulo 16384.
func slotOf(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
