package jspub

import "time"

// WithAfter replaces time.After in tests.
var WithAfter = func(after func(time.Duration) <-chan time.Time) Option { return withAfter(after) }
