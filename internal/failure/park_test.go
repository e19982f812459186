package failure

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParkDelaySpreadsForwardOnly(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		u    float64
		want time.Duration
	}{
		{"no spread at u=0", time.Second, 0, time.Second},
		{"a quarter more at the top", time.Second, 1, 1250 * time.Millisecond},
		{"in between", 4 * time.Second, 0.5, 4500 * time.Millisecond},
		{"due now still waits 1ms", 0, 0.5, time.Millisecond + 125*time.Microsecond},
		{"overdue is due now", -time.Second, 0, time.Millisecond},
		{"a bad draw is clamped", time.Second, 7, 1250 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, ParkDelay(tt.d, tt.u))
		})
	}
}
