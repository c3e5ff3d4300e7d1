// Package interceptors composes Flexway's gRPC interceptor chain, the one
// path every call takes, whether it came over gRPC or through the HTTP
// front's in-process channel. The packages below hold one interceptor each.
package interceptors
