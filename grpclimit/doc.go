// Package grpclimit puts the limits of a ratelimit.Limiter on RPC
// services: interceptors for grpc-go servers and clients, and refusals in
// the caller's protocol (Connect, gRPC, gRPC-Web) for RPC routes behind the
// HTTP middleware. A refusal is RESOURCE_EXHAUSTED with the retry hints
// that stock clients read: a google.rpc.RetryInfo and a
// google.rpc.QuotaFailure in the status details, and the
// grpc-retry-pushback-ms trailer of grpc-go's retry policy. docs/grpc.md
// shows the setup and the details.
package grpclimit
