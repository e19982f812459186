package natstest

import "go.uber.org/goleak"

// IgnoreServerGoroutines is the goleak option for what an embedded server
// leaves behind after Shutdown on purpose: a stream with a source (the
// work stream sources the park stream) keeps a goroutine that waits up to
// 30 s to set up its source consumer, and it ends on its own.
func IgnoreServerGoroutines() goleak.Option {
	return goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*stream).trySetupSourceConsumer.func3")
}
