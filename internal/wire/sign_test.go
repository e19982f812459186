package wire_test

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A signature made over SignedBytes survives encoding (the fast path and
// json.Marshal), decoding and parking, and covers the pool, the payload and
// the generation.
func TestSignedBytesSurviveTheWire(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	for _, wi := range []wire.WorkItem{
		{JobID: "j", ItemID: "a", Index: 3, Payload: json.RawMessage(`{"x":1}`), CorrelationID: "j:3"},
		{JobID: "j", ItemID: "b", Index: 4, Group: "eu", Payload: json.RawMessage(`{ "x" : "<&>" }`), Generation: 2,
			History: []messages.Attempt{{Step: 0}}, Reduce: &messages.ReduceInput{ResultsObject: "o"}},
	} {
		wi.Sig = wire.EncodeSig(ed25519.Sign(priv, wi.SignedBytes("gpu")))
		data, err := wire.EncodeWorkItem(&wi, 1<<20)
		require.NoError(t, err)
		var got wire.WorkItem
		require.NoError(t, wire.DecodeWorkItem(data, &got))
		got.Park = 7 // an agent parked it
		sig, err := wire.DecodeSig(got.Sig)
		require.NoError(t, err)
		require.True(t, ed25519.Verify(pub, got.SignedBytes("gpu"), sig), "%s", data)
		require.False(t, ed25519.Verify(pub, got.SignedBytes("default"), sig), "another pool")
		forged := got
		forged.Payload = json.RawMessage(`{"x":2}`)
		require.False(t, ed25519.Verify(pub, forged.SignedBytes("gpu"), sig), "another payload")
		forged = got
		forged.Generation++
		require.False(t, ed25519.Verify(pub, forged.SignedBytes("gpu"), sig), "another generation")
	}
}
