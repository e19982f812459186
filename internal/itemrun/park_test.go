package itemrun

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The parking half of the failure path, without a server: which retries
// are parked, what is scheduled, and what a superseded delivery does.
func TestParking(t *testing.T) {
	const tenSeconds = `[{"handler":"fail","retry_config":{"attempts":3,"backoff":"fixed","initial_delay":"10s","max_delay":"10s","jitter":false}}]`
	setup := func(t *testing.T) *failureAgent {
		f := newFailureAgent(t)
		f.a.parking.Store(true)
		f.a.cfg.ParkAfter = 5 * time.Second
		return f
	}
	parked := func(f *failureAgent, kind string) float64 {
		return counter(t, f.reg, "jetfleet_agent_parked_total", "kind", kind)
	}

	t.Run("a long retry is parked", func(t *testing.T) {
		f := setup(t)
		j := f.job(t, "j", tenSeconds, "")
		m := f.deliver(t, j, 1)
		require.Equal(t, "ack", m.disposition(), "acked once the copy is scheduled: no slot held")
		st := f.state(t, j)
		require.Equal(t, 1, st.Park)
		require.True(t, t0.Add(10*time.Second).Equal(st.ParkUntil), "park_until %s", st.ParkUntil)
		require.Equal(t, 1, st.StepAttempt, "the retry is recorded as a delayed nak's would be")
		require.Len(t, f.pub.parks, 1)
		s := f.pub.parks[0]
		require.Equal(t, wire.ParkSubject(messages.MustNames("fleet"), messages.DefaultPool, "j", "i1"), s.Subject)
		require.Equal(t, "@at "+t0.Add(10*time.Second).UTC().Format(time.RFC3339Nano), s.Header.Get(wire.HeaderSchedule))
		require.Equal(t, "fleet.parked.default.due.j", s.Header.Get(wire.HeaderScheduleTarget))
		require.Equal(t, wire.ParkMsgID("j", "i1", 0, 1), s.Header.Get(messages.HeaderMsgID))
		var wi wire.WorkItem
		require.NoError(t, json.Unmarshal(s.Data, &wi))
		require.Equal(t, 1, wi.Park)
		require.Equal(t, "i1", wi.ItemID)
		require.EqualValues(t, 1, parked(f, "parked"))
	})

	t.Run("a short retry is a delayed nak", func(t *testing.T) {
		f := setup(t)
		j := f.job(t, "j", `[{"handler":"fail","retry_config":{"attempts":3,"backoff":"fixed","initial_delay":"2s","jitter":false}}]`, "")
		require.Equal(t, "nak 2s", f.deliver(t, j, 1).disposition())
		require.Zero(t, f.state(t, j).Park)
		require.Empty(t, f.pub.parks)
	})

	t.Run("a failed schedule comes back soon and schedules again", func(t *testing.T) {
		f := setup(t)
		f.pub.parkErr = errors.New("no responders")
		j := f.job(t, "j", tenSeconds, "")
		require.Equal(t, "nak 1s", f.deliver(t, j, 1).disposition())
		require.Equal(t, 1, f.state(t, j).Park, "the park is in the state")
		f.pub.parkErr = nil
		require.Equal(t, "ack", f.deliver(t, j, 2).disposition(), "superseded: scheduled, acked, not run")
		require.Len(t, f.pub.parks, 1)
		require.Len(t, f.state(t, j).History, 1, "not run again")
		require.EqualValues(t, 1, parked(f, "superseded"))
	})

	t.Run("a superseded delivery is acked without running", func(t *testing.T) {
		f := setup(t)
		j := f.job(t, "j", tenSeconds, "")
		f.store(t, j, wire.ItemState{Park: 2, ParkUntil: t0.Add(time.Minute), StepAttempt: 2})
		require.Equal(t, "ack", f.deliverPark(t, j, 3, 1).disposition())
		require.Len(t, f.pub.parks, 1, "scheduled again: a duplicate if it was stored")
		require.Equal(t, wire.ParkMsgID("j", "i1", 0, 2), f.pub.parks[0].Header.Get(messages.HeaderMsgID))
		require.Equal(t, 2, f.state(t, j).StepAttempt, "not run")
		require.Nil(t, f.pub.result(t))
	})

	t.Run("a superseded delivery of a finished item is only acked", func(t *testing.T) {
		f := setup(t)
		j := f.job(t, "j", tenSeconds, "")
		f.store(t, j, wire.ItemState{Park: 1, Final: messages.OutcomeSucceeded})
		require.Equal(t, "ack", f.deliver(t, j, 2).disposition())
		require.Empty(t, f.pub.parks)
		require.Nil(t, f.pub.result(t), "the copy reported it")
	})

	t.Run("a parked copy that succeeds keeps its state, final", func(t *testing.T) {
		f := setup(t)
		j := f.job(t, "j", `[{"handler":"ok"}]`, "")
		f.store(t, j, wire.ItemState{Park: 1, StepAttempt: 1})
		require.Equal(t, "ack", f.deliverPark(t, j, 1, 1).disposition())
		require.Equal(t, messages.OutcomeSucceeded, f.pub.result(t).Outcome)
		st := f.state(t, j)
		require.NotNil(t, st, "kept for the superseded delivery")
		require.Equal(t, messages.OutcomeSucceeded, st.Final)
	})

	t.Run("parking off: a superseded delivery runs", func(t *testing.T) {
		f := setup(t)
		f.a.parking.Store(false)
		j := f.job(t, "j", `[{"handler":"ok"}]`, "")
		f.store(t, j, wire.ItemState{Park: 1})
		require.Equal(t, "ack", f.deliver(t, j, 2).disposition())
		require.Equal(t, messages.OutcomeSucceeded, f.pub.result(t).Outcome)
	})
}
