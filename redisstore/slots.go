package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed slots.lua
	slotsSource string
	slotsScript = redis.NewScript(slotsSource)

	releaseScript = redis.NewScript(`return redis.call("ZREM", KEYS[1], ARGV[1])`)
)

// Acquire implements [ratelimit.SlotStore] in one round trip: the slots of
// key are a sorted set PREFIX + ":inflight:" + key of tokens, each scored by
// the end of its lease.
func (s *Store) Acquire(ctx context.Context, key, token string, limit int64, lease time.Duration) (bool, error) {
	now := ""
	if s.now != nil {
		now = strconv.FormatInt(s.now().UnixMilli(), 10)
	}
	ms := max(lease.Milliseconds(), 1)
	var n int64
	err := s.within(ctx, func(ctx context.Context) (err error) {
		n, err = slotsScript.Run(ctx, s.client, []string{s.slotsKey(key)}, limit, ms, token, now).Int64()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("redisstore: %w", err)
	}
	return n == 1, nil
}

// Release implements [ratelimit.SlotStore].
func (s *Store) Release(ctx context.Context, key, token string) error {
	err := s.within(ctx, func(ctx context.Context) error {
		return releaseScript.Run(ctx, s.client, []string{s.slotsKey(key)}, token).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	return nil
}
