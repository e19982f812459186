package itemrun

import (
	"encoding/json"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A work item, or an item's retry state, written in a newer schema version
// than this agent reads is left for an agent of that release: a delayed
// nak, nothing run, nothing dead-lettered or reported, the state as it
// was. One of this version (or without "v", before v0.4.0) runs.
func TestNewerSchemaIsLeftForANewerAgent(t *testing.T) {
	newer := messages.SchemaVersion + 1
	item := func(v int) []byte {
		data, err := json.Marshal(wire.WorkItem{V: messages.Schema(v), JobID: "sj", ItemID: "i1", Payload: json.RawMessage(`{}`), CorrelationID: "c"})
		require.NoError(t, err)
		return data
	}
	tests := []struct {
		name      string
		work      []byte
		state     []byte // the item's retry state, when set
		wantNak   bool
		wantState []byte
	}{
		{name: "a newer work item", work: item(newer), wantNak: true},
		{name: "a newer work item that does not decode here", work: []byte(`{"v":` + itoa(newer) + `,"job_id":"sj","item_id":{"id":"i1","shard":3}}`), wantNak: true},
		{name: "a newer item state", work: item(0), state: []byte(`{"v":` + itoa(newer) + `,"job_id":"sj","item_id":"i1","step":{"index":0}}`), wantNak: true},
		{name: "this version's item runs", work: item(messages.SchemaVersion)},
		{name: "an item from before v0.4.0 (no v) runs", work: []byte(`{"job_id":"sj","item_id":"i1","index":0,"payload":{},"generation":0,"correlation_id":"c"}`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFailureAgent(t)
			f.job(t, "sj", `[{"handler":"ok"}]`, "")
			key := wire.ItemKey(messages.DefaultPool, "sj", "i1")
			if tt.state != nil {
				f.items.put(key, tt.state)
			}
			// The second delivery: the first reads no state.
			m := f.deliverRawN(t, testNames.WorkSubject(messages.DefaultPool, "sj"), tt.work, 2)
			if !tt.wantNak {
				require.Equal(t, "ack", m.disposition())
				require.Len(t, f.pub.results, 1)
				return
			}
			require.Equal(t, "nak "+newerSchemaDelay.String(), m.disposition())
			require.Empty(t, f.dlq.entries)
			require.Empty(t, f.pub.results)
			if tt.state != nil {
				require.Equal(t, string(tt.state), string(f.items.m[key].value), "the newer state is left as it was")
			}
			var left dto.Metric
			require.NoError(t, f.a.metrics.items.WithLabelValues(outcomeNewerSchema).Write(&left))
			require.Equal(t, 1.0, left.GetCounter().GetValue())
		})
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Every record and message this build writes names its schema version.
func TestWritersStampTheSchemaVersion(t *testing.T) {
	v := `"v":` + itoa(messages.SchemaVersion)
	for name, x := range map[string]any{
		"work item": &wire.WorkItem{JobID: "j"}, "item state": &wire.ItemState{JobID: "j"}, "job record": &wire.JobRecord{},
		"result": &messages.Result{JobID: "j"}, "dead letter": &messages.DLQEntry{JobID: "j"}, "event": &messages.Event{Type: "x"},
		"presence": &messages.AgentPresence{Name: "a"},
	} {
		data, err := json.Marshal(x)
		require.NoError(t, err)
		require.Contains(t, string(data), v, name)
	}
	fast, err := wire.EncodeWorkItem(&wire.WorkItem{JobID: "j", ItemID: "i", Payload: json.RawMessage(`{}`)}, 1<<20)
	require.NoError(t, err)
	require.Contains(t, string(fast), "{"+v+",")
	fast, err = wire.EncodeResult(&messages.Result{JobID: "j", ItemID: "i"}, 1<<20)
	require.NoError(t, err)
	require.Contains(t, string(fast), "{"+v+",")
}
