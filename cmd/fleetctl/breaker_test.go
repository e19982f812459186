package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestBreakerLine(t *testing.T) {
	t.Parallel()
	opened := time.Date(2026, 5, 1, 12, 0, 3, 412e6, time.Local)
	for _, tc := range []struct {
		name string
		br   messages.BreakerStatus
		want string
	}{
		{"closed", messages.BreakerStatus{State: "closed"}, "closed"},
		{"closed with failures", messages.BreakerStatus{State: "closed", Failures: 2}, "closed, 2 consecutive failure(s)"},
		{"open", messages.BreakerStatus{State: "open", OpenedAt: &opened}, "OPEN since 2026-05-01 12:00:03.412: items are parked"},
		{"half-open", messages.BreakerStatus{State: "half_open", OpenedAt: &opened, Probes: 2, Successes: 1},
			"HALF-OPEN (opened 2026-05-01 12:00:03.412): 2 probe(s) out, 1 success(es)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, breakerLine(&tc.br))
		})
	}
}
