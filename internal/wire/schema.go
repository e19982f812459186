package wire

import (
	"fmt"
	"strconv"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// SchemaOfHeader is the schema version in a message's messages.HeaderSchema value:
// 1 when absent, and an error naming the header when it is not a number.
func SchemaOfHeader(value string) (messages.Schema, error) {
	if value == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(value)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("messages: header %s: %q is not a schema version (a number from 1)", messages.HeaderSchema, value)
	}
	return messages.Schema(n), nil
}
