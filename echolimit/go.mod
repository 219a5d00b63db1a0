module github.com/tokenfair/ratelimit/echolimit

go 1.25.0

require (
	github.com/labstack/echo/v4 v4.15.1
	github.com/stretchr/testify v1.12.1
	github.com/tokenfair/ratelimit v0.1.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/labstack/gommon v0.4.2 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	github.com/valyala/fasttemplate v1.2.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.46.0 // indirect
	golang.org/x/net v0.48.0 // indirect
	golang.org/x/sys v0.39.0 // indirect
	golang.org/x/text v0.32.0 // indirect
)

replace github.com/tokenfair/ratelimit => ../
