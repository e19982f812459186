package schedule

import (
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Catchup is the schedule's catch-up window.
func Catchup(s *messages.ScheduleSpec) time.Duration {
	if s.Catchup == nil {
		return time.Duration(messages.DefaultCatchup)
	}
	return time.Duration(*s.Catchup)
}

// Overlap is the schedule's overlap policy.
func Overlap(s *messages.ScheduleSpec) string {
	if s.Overlap == "" {
		return messages.OverlapSkip
	}
	return s.Overlap
}
