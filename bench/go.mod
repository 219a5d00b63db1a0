module github.com/tokenfair/ratelimit/bench

go 1.24.0

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/redis/go-redis/v9 v9.22.0
	github.com/tokenfair/ratelimit v0.0.0
	github.com/tokenfair/ratelimit/redisstore v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
)

replace (
	github.com/tokenfair/ratelimit => ../
	github.com/tokenfair/ratelimit/redisstore => ../redisstore
)
