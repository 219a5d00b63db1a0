module github.com/tokenfair/ratelimit/examples

go 1.24.0

require (
	github.com/stretchr/testify v1.12.1
	github.com/tokenfair/ratelimit v0.0.0
	go.uber.org/goleak v1.3.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect

replace github.com/tokenfair/ratelimit => ../
