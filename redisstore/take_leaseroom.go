//go:build noleaseroom

package redisstore

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// Built with the tag noleaseroom, the script lets a bucket refill into
// the room of the tokens leased and not yet spent: the mutation that
// TestLeasesNeverOverAdmit must catch, since a lease's tokens spent late
// then join tokens the exact bucket never had.
func init() {
	const room = `    if not le(hS, hN, dS, dN) then
      dS, dN = hS, hN
    end
`
	if !strings.Contains(takeSource, room) {
		panic("redisstore: the lease room is not in take.lua")
	}
	takeSource = strings.Replace(takeSource, room, "", 1)
	takeScript = redis.NewScript(takeSource)
	argSHA, argSource = takeScript.Hash(), takeSource
}
