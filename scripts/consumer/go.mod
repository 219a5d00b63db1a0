module github.com/tokenfair/ratelimit/scripts/consumer

go 1.25.0

require golang.org/x/mod v0.30.0
