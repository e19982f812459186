package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// JobSubmitSpec submits a job built in code. It is [Client.JobSubmit] of the
// spec's JSON form: the coordinator validates it the same way, and a bad
// field comes back as a *messages.APIError naming it.
func (c *Client) JobSubmitSpec(ctx context.Context, spec *messages.JobSpec) (*messages.SubmitReply, error) {
	if spec == nil {
		return nil, fmt.Errorf("client: SubmitSpec: nil spec")
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("client: SubmitSpec: %w", err)
	}
	return c.JobSubmit(ctx, data)
}

// ItemsOf encodes items for JobSpec.Items: each is marshalled to JSON, so
// a struct's json tags name its fields (an "id" field is the item's id).
// A typed handler (agent.HandleFunc) decodes the same type back.
func ItemsOf[T any](items ...T) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(items))
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, fmt.Errorf("client: items[%d]: %w", i, err)
		}
		out[i] = b
	}
	return out, nil
}
