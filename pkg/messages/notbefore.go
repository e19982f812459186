package messages

// StateScheduled is the state of an accepted job held until its
// not_before time; it becomes running then.
const StateScheduled = "scheduled"
