package wire

import (
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// PauseRecord is the value of a pause key: when, and by which coordinator.
type PauseRecord struct {
	V  messages.Schema `json:"v"` // docs/contract.md §8
	At time.Time       `json:"at"`
	By string          `json:"by,omitempty"`
}

// PauseJobKey is a paused job's key in the pause bucket.
func PauseJobKey(job string) string { return "job." + job }

// PausePoolKey is a paused pool's key in the pause bucket.
func PausePoolKey(pool string) string { return "pool." + pool }

// ParsePauseKey tells a pause bucket key's kind (PausedByJob or
// PausedByPool) and name; ok is false for any other key.
func ParsePauseKey(key string) (kind, name string, ok bool) {
	if j, found := strings.CutPrefix(key, "job."); found && j != "" {
		return messages.PausedByJob, j, true
	}
	if p, found := strings.CutPrefix(key, "pool."); found && p != "" {
		return messages.PausedByPool, p, true
	}
	return "", "", false
}

// HeldMsgID is the de-duplication id of an item's held copy made from the
// work message at stream sequence workSeq: an agent that holds the same
// delivery twice (a crash before its ack) stores one copy.
func HeldMsgID(job, itemID string, generation int, workSeq uint64) string {
	return WorkMsgID(job, itemID, generation) + "/h" + strconv.FormatUint(workSeq, 10)
}

// ReleasedMsgID is the de-duplication id of the work message a held copy
// (at sequence heldSeq of pool's park stream) is moved back as: a leader
// that moves it twice (a failover before the copy was deleted) publishes
// it once.
func ReleasedMsgID(job, pool string, heldSeq uint64) string {
	return job + "/released/" + pool + "/" + strconv.FormatUint(heldSeq, 10)
}
