package wire

import (
	"strconv"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Keys of the control bucket.
const LeaseKey = "leader"

// ReplayKey is a DLQ replay's key in the control bucket.
func ReplayKey(id string) string { return "replay." + id }

// CancelKey is a job's cancel request's key in the control bucket.
func CancelKey(job string) string { return "cancel." + job }

// AgentKey is an agent's key in the agents bucket: its pool and its
// base64url-encoded name (names may hold dots and any other byte).
func AgentKey(pool, name string) string { return pool + "." + messages.EncodeItemID(name) }

// ItemKey is the fleet_items KV key of an item run by pool's agents. The
// pool comes first so that an agent can be granted its pool's keys only.
// It is at most 2*MaxTokenLen+2+MaxEncodedItemID bytes whatever the item id.
func ItemKey(pool, job, itemID string) string {
	return pool + "." + job + "." + messages.EncodeItemID(itemID)
}

// WorkMsgID is the de-duplication id of a work message.
func WorkMsgID(job, itemID string, generation int) string {
	return job + "/" + messages.EncodeItemID(itemID) + "/" + strconv.Itoa(generation)
}

// ParkMsgID is the de-duplication id of the park-th parked copy of an
// item's work message (in the park stream): scheduling it again, after a
// crash, is a no-op.
func ParkMsgID(job, itemID string, generation, park int) string {
	return WorkMsgID(job, itemID, generation) + "/p" + strconv.Itoa(park)
}
