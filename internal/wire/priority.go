package wire

import "github.com/jetfleet/jetfleet/pkg/messages"

// EffectivePriority is the job's priority: Priority, or messages.DefaultPriority
// when unset.
func EffectivePriority(s *messages.JobSpec) int {
	if s == nil || s.Priority == nil {
		return messages.DefaultPriority
	}
	return *s.Priority
}
