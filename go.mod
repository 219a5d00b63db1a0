module github.com/tokenfair/ratelimit

go 1.24
