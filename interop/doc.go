// Package interop tests mqstore's name server and broker with the
// unmodified rocketmq-client-go, in its own module so the client's
// dependencies stay out of the main module. Everything runs on loopback.
package interop
