package messages

import (
	"errors"
	"fmt"
	"strconv"
)

// SchemaVersion is the version of the wire schema this build writes and
// the newest it reads (docs/contract.md §8). A change that an older
// reader would misread raises it; a new optional field does not, since
// every reader ignores members it does not know.
const SchemaVersion = 1

// HeaderSchema carries the schema version of a message whose body an
// older process decodes strictly, refusing a member it does not know: an
// API request and a durable submission (a job spec). Every other message
// and record carries its version in its body (Schema).
const HeaderSchema = "Jetfleet-Schema"

// ErrNewerSchema is wrapped by the errors of a reader that met a message
// or record written in a schema version newer than SchemaVersion. Such a
// message is left for a process that can read it (docs/contract.md §8).
var ErrNewerSchema = errors.New("messages: written in a newer schema version")

// Schema is the schema version a message or record carries, as its "v"
// member. The zero value is written as SchemaVersion, so that every value
// a process of this build writes says which schema it follows; a value
// read without "v" (written before v0.4.0) is version 1.
type Schema int

// MarshalJSON writes s, or SchemaVersion when s is zero.
func (s Schema) MarshalJSON() ([]byte, error) {
	if s == 0 {
		s = SchemaVersion
	}
	return strconv.AppendInt(nil, int64(s), 10), nil
}

// Version is the schema version s names: 1 when absent.
func (s Schema) Version() int { return max(int(s), 1) }

// Check returns an error wrapping ErrNewerSchema when s is newer than
// this build reads; what names the message or record.
func (s Schema) Check(what string) error {
	if s.Version() > SchemaVersion {
		return fmt.Errorf("%w: %s has schema version %d, this build reads up to %d", ErrNewerSchema, what, s.Version(), SchemaVersion)
	}
	return nil
}
