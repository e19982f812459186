package limit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func cfg(rate float64, burst, conc int, adaptive bool) messages.LimitConfig {
	return messages.LimitConfig{Rate: messages.Rate(rate), Burst: burst, Concurrency: conc, Adaptive: adaptive}
}

// takeAll takes single tokens at now until refused, and counts them.
func takeAll(r Record, now time.Time) (Record, int, Grant) {
	n := 0
	for {
		var g Grant
		r, g = r.Take(now, Request{Agent: "a", Tokens: 1})
		if !g.Granted() {
			return r, n, g
		}
		n++
	}
}

func TestTakeBucket(t *testing.T) {
	r := Record{}.Configure(t0, cfg(40, 10, 0, false))
	r, n, g := takeAll(r, t0)
	require.Equal(t, 6, n, "a new limit starts with its burst, less TransitMargin of rate")
	require.Equal(t, 25*time.Millisecond, g.Wait, "the next token accrues in 1/rate")
	r, n, _ = takeAll(r, t0.Add(100*time.Millisecond))
	require.Equal(t, 4, n, "100ms of 40/s")
	r, n, _ = takeAll(r, t0.Add(time.Hour))
	require.Equal(t, 6, n, "refill stops at the burst")
	_, n, _ = takeAll(r, t0.Add(time.Hour-time.Second))
	require.Equal(t, 0, n, "a clock behind the last take refills nothing")
}

func TestBurstDefaultsToOneSecond(t *testing.T) {
	r := Record{}.Configure(t0, cfg(40, 0, 0, false))
	_, n, _ := takeAll(r, t0)
	require.Equal(t, 36, n, "one second of rate, less TransitMargin of it")
	r = Record{}.Configure(t0, cfg(0.5, 0, 0, false))
	_, n, _ = takeAll(r, t0)
	require.Equal(t, 1, n, "at least one token")
}

func TestTakeBatch(t *testing.T) {
	r := Record{}.Configure(t0, cfg(1000, 110, 0, false)) // holds 10
	r, g := r.Take(t0, Request{Agent: "a", Tokens: 4})
	require.Equal(t, 4, g.Tokens)
	r, g = r.Take(t0, Request{Agent: "a", Tokens: 100})
	require.Equal(t, 6, g.Tokens, "a batch gets what the bucket holds")
	_, g = r.Take(t0, Request{Agent: "a", Tokens: 100})
	require.False(t, g.Granted())
	require.Equal(t, 10, r.Stats.Calls, "calls count the tokens granted")
}

func TestSlotsAreLeases(t *testing.T) {
	lease := 10 * time.Second
	r := Record{}.Configure(t0, cfg(0, 0, 2, false))
	r, g := r.Take(t0, Request{Agent: "a", Slot: true, Lease: lease})
	require.True(t, g.Granted() && g.Slot)
	r, g = r.Take(t0, Request{Agent: "b", Slot: true, Lease: lease})
	require.True(t, g.Slot)
	_, g = r.Take(t0, Request{Agent: "c", Slot: true, Lease: lease})
	require.True(t, g.Full)
	require.False(t, g.Granted())
	require.Equal(t, 2, r.InFlight(t0))

	// b releases: c gets its slot.
	r = r.Release(t0.Add(time.Second), "b", 1, Neutral, lease)
	require.Equal(t, 1, r.InFlight(t0.Add(time.Second)))
	r, g = r.Take(t0.Add(time.Second), Request{Agent: "c", Slot: true, Lease: lease})
	require.True(t, g.Slot)

	// a dies holding its slot: its lease runs out, nothing leaks.
	at := t0.Add(lease)
	require.Equal(t, 1, r.InFlight(at), "a's lease ended; c's runs to 11s")
	require.Equal(t, 0, r.InFlight(t0.Add(lease+time.Second)))
	r, g = r.Take(at, Request{Agent: "d", Slot: true, Lease: lease})
	require.True(t, g.Slot)
	_, ok := r.Holders["a"]
	require.False(t, ok, "an expired holder is dropped")

	// A release of a slot not held changes nothing.
	r2 := r.Release(at, "zzz", 1, Neutral, lease)
	require.Equal(t, r.InFlight(at), r2.InFlight(at))
}

// An agent that holds every slot and keeps handing them to its own
// callers would starve the others: while another agent waits with fewer
// slots, the holder is refused more and gives its slots back.
func TestSlotsSpreadBetweenAgents(t *testing.T) {
	lease := 10 * time.Second
	r := Record{}.Configure(t0, cfg(0, 0, 4, false))
	var g Grant
	for range 4 {
		r, g = r.Take(t0, Request{Agent: "a", Slot: true, Lease: lease, More: true})
		require.True(t, g.Slot)
	}
	require.False(t, r.Behind(t0, "a"), "nobody else waits")

	r, g = r.Take(t0, Request{Agent: "b", Slot: true, Lease: lease, More: true})
	require.True(t, g.Full)
	require.True(t, g.changed, "the refusal records b as waiting")
	require.True(t, r.Behind(t0, "a"), "b waits with fewer slots: a gives its slots back")
	_, g = r.Take(t0.Add(time.Millisecond), Request{Agent: "b", Slot: true, Lease: lease, More: true})
	require.False(t, g.changed, "a refusal soon after writes nothing")

	// a gives one back: a is refused it, b gets it.
	r = r.Release(t0, "a", 1, Neutral, lease)
	_, g = r.Take(t0, Request{Agent: "a", Slot: true, Lease: lease})
	require.True(t, g.Full, "a holds more than b, which waits")
	r, g = r.Take(t0, Request{Agent: "b", Slot: true, Lease: lease, More: true})
	require.True(t, g.Slot)
	r = r.Release(t0, "a", 1, Neutral, lease)
	require.True(t, r.Behind(t0, "a"), "a holds 2, b 1 and still waits")
	r, g = r.Take(t0, Request{Agent: "b", Slot: true, Lease: lease})
	require.True(t, g.Slot, "the agent holding fewest is never refused for fairness")
	require.NotContains(t, r.Waiters, "b", "a grant with no more callers waiting ends b's want")
	require.False(t, r.Behind(t0, "a"))

	// A want lapses after WaiterTTL.
	r, _ = r.Take(t0, Request{Agent: "c", Slot: true, Lease: lease})
	require.True(t, r.Behind(t0, "a"))
	require.False(t, r.Behind(t0.Add(WaiterTTL), "a"))
}

func TestAdaptive(t *testing.T) {
	r := Record{}.Configure(t0, cfg(40, 10, 0, true))
	r = r.Release(t0, "a", 0, Overload, 0)
	require.Equal(t, 20.0, r.Rate())
	r = r.Release(t0.Add(100*time.Millisecond), "a", 0, Overload, 0)
	require.Equal(t, 20.0, r.Rate(), "one cut per CutInterval")
	now := t0
	for range 20 {
		now = now.Add(CutInterval)
		r = r.Release(now, "a", 0, Overload, 0)
	}
	require.Equal(t, 40*FloorFraction, r.Rate(), "floor")
	require.Equal(t, 1.0, r.burst(), "burst scales down with the rate")
	for range 100 {
		r = r.Release(now, "a", 0, Success, 0)
	}
	require.Equal(t, 40.0, r.Rate(), "successes bring it back to the configured rate")
	require.Zero(t, r.Current)

	// Not adaptive: outcomes are only counted.
	s := Record{}.Configure(t0, cfg(40, 10, 0, false)).Release(t0, "a", 0, Overload, 0)
	require.Equal(t, 40.0, s.Rate())
	require.Equal(t, 1, s.Stats.Overloads)
}

func TestConfigureKeepsState(t *testing.T) {
	r := Record{}.Configure(t0, cfg(40, 10, 3, true))
	r, _, _ = takeAll(r, t0)
	r = r.Release(t0, "a", 0, Overload, 0) // 20/s
	r = r.Configure(t0, cfg(100, 50, 3, true))
	require.Equal(t, 20.0, r.Rate(), "the adaptive rate survives a raise of the configured one")
	_, n, _ := takeAll(r, t0)
	require.Zero(t, n, "tokens are not refilled by a configure")
	r = r.Configure(t0, cfg(10, 0, 0, true))
	require.Equal(t, 10.0, r.Rate(), "a configured rate below the adaptive one wins")
}

func TestStatsRoll(t *testing.T) {
	s := Stats{}.roll(t0)
	s.Calls = 5
	s = s.roll(t0.Add(61 * time.Second))
	require.Equal(t, 5, s.PrevCalls)
	require.Zero(t, s.Calls)
	require.Equal(t, t0.Add(time.Minute), s.Since)
	s = s.roll(t0.Add(10 * time.Minute))
	require.Zero(t, s.PrevCalls)
}

func TestKeys(t *testing.T) {
	name, named := KeyName(NamedKey("api"))
	require.True(t, named)
	require.Equal(t, "api", name)
	k := InlineKey("t:a b/é")
	require.Regexp(t, `^[-_=.a-zA-Z0-9]+$`, k)
	name, named = KeyName(k)
	require.False(t, named)
	require.Equal(t, "t:a b/é", name)
}

// However takes are timed, the tokens granted in any window of one second
// plus TransitMargin stay within rate + burst: a call's arrival may lag
// its take by up to TransitMargin and the dependency still sees at most
// rate + burst in any second.
func TestWindowBound(t *testing.T) {
	const rate, burst = 40, 10
	for seed := range 20 {
		r := Record{}.Configure(t0, cfg(rate, burst, 0, false))
		var grants []time.Time
		now := t0
		x := uint64(seed + 1)
		for now.Before(t0.Add(20 * time.Second)) {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			// Bursts of demand and quiet spells.
			now = now.Add(time.Duration(x%50) * time.Millisecond * time.Duration(1+(x>>40)%20/19*100))
			var g Grant
			r, g = r.Take(now, Request{Agent: "a", Tokens: 1 + int(x>>50)%4})
			for range g.Tokens {
				grants = append(grants, now)
			}
		}
		j := 0
		for i := range grants {
			for grants[i].Sub(grants[j]) >= time.Second+100*time.Millisecond {
				j++
			}
			require.LessOrEqual(t, i-j+1, rate+burst, "seed %d at %s", seed, grants[i].Sub(t0))
		}
	}
}

// A handover keeps the finished call's slot for the agent's waiting call
// unless another agent waits holding fewer; the outcome counts either way.
func TestHandover(t *testing.T) {
	lease := time.Minute
	for _, tc := range []struct {
		name       string
		otherWaits bool
		want       bool
	}{
		{name: "no other agent waiting", want: true},
		{name: "another agent waits with fewer slots", otherWaits: true, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Record{}.Configure(t0, cfg(0, 0, 2, true))
			r, g := r.Take(t0, Request{Agent: "a", Slot: true, Lease: lease})
			require.True(t, g.Slot)
			if tc.otherWaits {
				r, g = r.Take(t0, Request{Agent: "a", Slot: true, Lease: lease})
				require.True(t, g.Slot)
				r, g = r.Take(t0, Request{Agent: "b", Slot: true, Lease: lease})
				require.True(t, g.Full, "both slots are a's")
			}
			now := t0.Add(WaiterTTL / 2) // b still counts as waiting
			held := r.held(now, "a")
			next, kept := r.Handover(now, "a", Success, lease)
			require.Equal(t, tc.want, kept)
			if kept {
				require.Equal(t, held, next.held(now, "a"))
				require.Equal(t, now.Add(lease), next.Holders["a"].Until, "the lease is renewed")
			} else {
				require.Equal(t, held-1, next.held(now, "a"), "the slot goes back to the limit")
			}
			require.Equal(t, 1, next.Stats.Successes)
		})
	}
}

// A take leases extra slots for the agent's callers to come only while at
// least half of the cap stays free and no other agent waits; never past
// the cap.
func TestTakeLeasesExtraSlotsWhileRoomy(t *testing.T) {
	lease := 10 * time.Second
	r := Record{}.Configure(t0, cfg(0, 0, 10, false))
	require.Equal(t, 5, r.Roomy(t0))
	r, g := r.Take(t0, Request{Agent: "a", Slot: true, Lease: lease, Extra: 8})
	require.True(t, g.Slot)
	require.Equal(t, 4, g.Extra, "one slot and four more: half of the cap stays free")
	require.Equal(t, 5, r.InFlight(t0))
	require.Equal(t, 5, r.held(t0, "a"))
	require.Zero(t, r.Roomy(t0))

	r, g = r.Take(t0, Request{Agent: "b", Slot: true, Lease: lease, Extra: 8})
	require.True(t, g.Slot)
	require.Zero(t, g.Extra, "the limit is no longer roomy")

	// Another agent waiting: no extra slots, however roomy.
	r = Record{}.Configure(t0, cfg(0, 0, 100, false))
	r.Waiters = map[string]time.Time{"b": t0.Add(WaiterTTL)}
	_, g = r.Take(t0, Request{Agent: "a", Slot: true, Lease: lease, Extra: 8})
	require.True(t, g.Slot)
	require.Zero(t, g.Extra)
	require.True(t, r.OthersWaiting(t0, "a"))
	require.False(t, r.OthersWaiting(t0, "b"))
	require.False(t, r.OthersWaiting(t0.Add(WaiterTTL), "a"), "a want lapses")

	// Never past the cap, whatever is asked.
	r = Record{}.Configure(t0, cfg(0, 0, 3, false))
	for range 5 {
		r, _ = r.Take(t0, Request{Agent: "a", Slot: true, Lease: lease, Extra: 100})
		require.LessOrEqual(t, r.InFlight(t0), 3)
	}
}

// Tokens given back go into the bucket, up to the burst, and out of the
// calls counted: the record is as if they had never been taken.
func TestGiveBack(t *testing.T) {
	r := Record{}.Configure(t0, cfg(1000, 110, 0, false)) // holds 10
	r, g := r.Take(t0, Request{Agent: "a", Tokens: 4})
	require.Equal(t, 4, g.Tokens)
	r, g = r.Take(t0, Request{Agent: "a", Tokens: 1, Return: 3}) // three of the four unused
	require.Equal(t, 1, g.Tokens)
	require.InDelta(t, 8, r.Tokens, 1e-9, "10 - 4 + 3 - 1")
	require.Equal(t, 2, r.Stats.Calls, "two calls: one token of each take")
	// Refilled to the burst meanwhile: what comes back is capped as it would have been.
	r = r.GiveBack(1).normalize(t0.Add(time.Second))
	require.InDelta(t, r.burst(), r.Tokens, 1e-9)
	require.Equal(t, 1, r.Stats.Calls)
	r = r.GiveBack(5)
	require.InDelta(t, r.burst(), r.Tokens, 1e-9, "never past the burst")
	require.Zero(t, r.Stats.Calls, "never below zero")
}
