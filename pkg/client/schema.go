package client

import (
	"strconv"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// schemaHeader is the messages.HeaderSchema value of the API requests and
// submissions this build sends (docs/contract.md, "Compatibility").
var schemaHeader = strconv.Itoa(messages.SchemaVersion)
