package limit

import (
	"math"
	"slices"
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// AIMD parameters of an adaptive limit.
const (
	// CutFactor multiplies the current rate on an overload failure.
	CutFactor = 0.5
	// CutInterval is the least time between two cuts: the failures of the
	// calls in flight when the first one failed count once.
	CutInterval = 500 * time.Millisecond
	// FloorFraction of the configured rate is the lowest current rate.
	FloorFraction = 0.02
	// RaiseFraction of the configured rate is added per success.
	RaiseFraction = 0.02
	// keepWriters is how many write ids a record keeps.
	keepWriters = 8
	// WaiterTTL is how long an agent refused a slot counts as waiting for
	// one; its refused takes renew it.
	WaiterTTL = 500 * time.Millisecond
)

// Record is one limit's stored state. Its methods are pure: they take the
// time and return a new value.
type Record struct {
	// V is the schema version (docs/contract.md §8).
	V messages.Schema `json:"v"`
	messages.LimitConfig
	// Current is the adaptive current rate per second; 0 = the configured
	// rate.
	Current float64 `json:"current,omitempty"`
	// Tokens are the tokens in the bucket at At.
	Tokens float64   `json:"tokens"`
	At     time.Time `json:"at"`
	// CutAt is when an overload last cut the current rate.
	CutAt time.Time `json:"cut_at,omitzero"`
	// Holders are the agents holding concurrency slots, by agent id.
	Holders map[string]Holder `json:"holders,omitempty"`
	// Waiters are the agents refused a slot, by agent id, with when their
	// want lapses: while one waits, an agent holding more slots than it
	// is refused more and gives its slots back to the limit rather than
	// to its own callers (fairness between agents).
	Waiters map[string]time.Time `json:"waiters,omitempty"`
	// Stats count calls and outcomes per minute.
	Stats Stats `json:"stats"`
	// Writers are the ids of the last writes (kvstate.Config.WrittenBy).
	Writers []string `json:"writers,omitempty"`
	// Shares weighs the pools' parts of a named limit shared by pools
	// (share.go), by pool; a pool not named weighs 1. Configuration: only
	// in the limit's own record.
	Shares map[string]int `json:"shares,omitempty"`
	// Used is when a pool's share last granted or refused a take (share.go).
	Used time.Time `json:"used,omitzero"`
}

// Holder is one agent's concurrency slots and when its lease ends.
type Holder struct {
	Slots int       `json:"slots"`
	Until time.Time `json:"until"`
}

// Stats are the calls started and the outcomes reported in the minute
// from Since, and in the minute before (Prev…).
type Stats struct {
	Since         time.Time `json:"since,omitzero"`
	Calls         int       `json:"calls,omitempty"`
	Successes     int       `json:"successes,omitempty"`
	Overloads     int       `json:"overloads,omitempty"`
	PrevCalls     int       `json:"prev_calls,omitempty"`
	PrevSuccesses int       `json:"prev_successes,omitempty"`
	PrevOverloads int       `json:"prev_overloads,omitempty"`
}

// roll moves the minute window to the one holding now.
func (s Stats) roll(now time.Time) Stats {
	switch {
	case s.Since.IsZero() || now.Sub(s.Since) >= 2*time.Minute:
		return Stats{Since: now}
	case now.Sub(s.Since) >= time.Minute:
		return Stats{Since: s.Since.Add(time.Minute), PrevCalls: s.Calls, PrevSuccesses: s.Successes, PrevOverloads: s.Overloads}
	}
	return s
}

// Rate is the current rate per second: the configured one, or the
// adaptive current rate below it.
func (r Record) Rate() float64 {
	rate := r.LimitConfig.Rate.PerSecond()
	if r.Adaptive && r.Current > 0 && r.Current < rate {
		return r.Current
	}
	return rate
}

// TransitMargin is the spread of the time between a take and its call's
// arrival at the dependency that a limit absorbs: the bucket holds
// TransitMargin of rate less than the burst, so that the calls arriving
// in any second stay within rate + burst even when some taken just
// before it arrive in it.
const TransitMargin = 100 * time.Millisecond

// burst is the bucket's capacity at the current rate: the configured
// burst less TransitMargin of rate, scaled down with an adaptive rate (at
// least one token).
func (r Record) burst() float64 {
	b := float64(r.WithDefaults().Burst)
	b -= math.Ceil(r.LimitConfig.Rate.PerSecond() * TransitMargin.Seconds())
	b = max(b, 1)
	if rate := r.LimitConfig.Rate.PerSecond(); rate > 0 && r.Rate() < rate {
		b = max(1, math.Floor(b*r.Rate()/rate))
	}
	return b
}

// TokensAt are the tokens available at now.
func (r Record) TokensAt(now time.Time) float64 {
	if r.LimitConfig.Rate == 0 {
		return 0
	}
	if r.At.IsZero() {
		return r.burst()
	}
	dt := now.Sub(r.At).Seconds()
	if dt < 0 {
		dt = 0 // a clock behind the last writer's: no refill, no loss
	}
	return min(r.burst(), r.Tokens+dt*r.Rate())
}

// InFlight counts the slots held by unexpired leases at now.
func (r Record) InFlight(now time.Time) int {
	n := 0
	for _, h := range r.Holders {
		if h.Until.After(now) {
			n += h.Slots
		}
	}
	return n
}

// normalize refills the bucket to now and drops expired leases.
func (r Record) normalize(now time.Time) Record {
	if r.LimitConfig.Rate > 0 {
		r.Tokens, r.At = r.TokensAt(now), now
	}
	if len(r.Holders) > 0 {
		hs := make(map[string]Holder, len(r.Holders))
		for a, h := range r.Holders {
			if h.Until.After(now) && h.Slots > 0 {
				hs[a] = h
			}
		}
		r.Holders = hs
	}
	if len(r.Waiters) > 0 {
		ws := make(map[string]time.Time, len(r.Waiters))
		for a, until := range r.Waiters {
			if until.After(now) {
				ws[a] = until
			}
		}
		r.Waiters = ws
	}
	r.Stats = r.Stats.roll(now)
	return r
}

// held is how many slots agent holds at now.
func (r Record) held(now time.Time, agent string) int {
	if h, ok := r.Holders[agent]; ok && h.Until.After(now) {
		return h.Slots
	}
	return 0
}

// Behind reports whether another agent waits for a slot of the limit at
// now holding fewer slots than agent: agent then takes no more slots, and
// gives back the ones its calls end rather than hand them to its own
// waiting callers, until the slots are spread evenly. The agents holding
// the fewest slots are never refused for fairness, so the limit never
// stalls on it.
func (r Record) Behind(now time.Time, agent string) bool {
	mine := r.held(now, agent)
	for w, until := range r.Waiters {
		if w != agent && until.After(now) && r.held(now, w) < mine {
			return true
		}
	}
	return false
}

// Roomy is how many more slots can be held at now while at least half of
// the cap stays free (negative: fewer are free already). An agent leases
// slots for its callers to come, and keeps the slots of its calls that
// end, only while the limit is that roomy (Limiter). 0 for a limit without
// a cap.
func (r Record) Roomy(now time.Time) int {
	if r.Concurrency <= 0 {
		return 0
	}
	return r.Concurrency - r.InFlight(now) - (r.Concurrency+1)/2
}

// OthersWaiting reports whether an agent other than agent waits for a slot
// at now.
func (r Record) OthersWaiting(now time.Time, agent string) bool {
	for w, until := range r.Waiters {
		if w != agent && until.After(now) {
			return true
		}
	}
	return false
}

// wants records agent as waiting for a slot at now; changed is false when
// its entry already lasts past half of WaiterTTL (no write needed).
func (r Record) wants(now time.Time, agent string) (next Record, changed bool) {
	if until, ok := r.Waiters[agent]; ok && until.After(now.Add(WaiterTTL/2)) {
		return r, false
	}
	ws := make(map[string]time.Time, len(r.Waiters)+1)
	for a, until := range r.Waiters {
		ws[a] = until
	}
	ws[agent] = now.Add(WaiterTTL)
	r.Waiters = ws
	return r, true
}

// satisfied drops agent from the waiters.
func (r Record) satisfied(agent string) Record {
	if _, ok := r.Waiters[agent]; !ok {
		return r
	}
	ws := make(map[string]time.Time, len(r.Waiters))
	for a, until := range r.Waiters {
		if a != agent {
			ws[a] = until
		}
	}
	r.Waiters = ws
	return r
}

// Configure sets the configuration, keeping the tokens (at most the new
// burst) and an adaptive current rate (at most the new rate).
func (r Record) Configure(now time.Time, cfg messages.LimitConfig) Record {
	r = r.normalize(now)
	r.LimitConfig = cfg
	if !cfg.Adaptive || r.Current >= cfg.Rate.PerSecond() {
		r.Current = 0
	}
	if cfg.Rate > 0 {
		r.Tokens = min(r.Tokens, r.burst())
		if r.At.IsZero() {
			r.Tokens, r.At = r.burst(), now
		}
	}
	return r
}

// Request is what one take asks for.
type Request struct {
	// Agent is the taker's id, under which its slots are leased.
	Agent string
	// Tokens is how many tokens it would like (at least 1 is needed; more
	// are a batch for the agent's other callers).
	Tokens int
	// Slot asks for one concurrency slot as well (when the limit has a
	// concurrency cap).
	Slot bool
	// Lease is how long the agent's slots stay held without another take
	// or release.
	Lease time.Duration
	// More: the agent has other callers waiting for a slot of the limit
	// besides this one (a granted slot then leaves it among the waiters).
	More bool
	// Extra asks, with Slot, for up to this many more slots, leased to the
	// agent for its callers to come: granted only while no other agent
	// waits and at least half of the cap stays free (Record.Take).
	Extra int
	// Return gives back tokens that the agent's earlier takes leased and
	// no call used (Record.GiveBack), before the take is decided.
	Return int
}

// Grant is a take's answer. Nothing is granted unless the first token and
// the slot both are.
type Grant struct {
	// Tokens granted (0: none; the limit has no rate: 1).
	Tokens int
	// Slot is true when a slot was leased.
	Slot bool
	// Wait, when nothing was granted, is how long until a token accrues
	// (0 when waiting on a slot: when one frees is not known).
	Wait time.Duration
	// Full: nothing was granted because every slot is held, or because
	// another agent waiting holds fewer (Record.Behind).
	Full bool
	// Extra is how many more slots than the one were leased (Request.Extra).
	Extra int
	// changed: a refusal that recorded the agent among the waiters.
	changed bool
}

// Granted reports whether the take may start a call.
func (g Grant) Granted() bool { return g.Tokens > 0 }

// Take decides a take at now: r's next value and the grant.
func (r Record) Take(now time.Time, q Request) (Record, Grant) {
	r = r.normalize(now).GiveBack(q.Return)
	given := q.Return > 0 // a write even if nothing is granted
	slot := q.Slot && r.Concurrency > 0
	if slot && (r.InFlight(now) >= r.Concurrency || r.Behind(now, q.Agent)) {
		r, changed := r.wants(now, q.Agent)
		return r, Grant{Full: true, changed: changed || given}
	}
	g := Grant{Tokens: 1, Slot: slot}
	if slot && q.Extra > 0 && !r.OthersWaiting(now, q.Agent) {
		g.Extra = max(0, min(q.Extra, r.Roomy(now)-1))
	}
	if r.LimitConfig.Rate > 0 {
		have := math.Floor(r.Tokens + 1e-9)
		if have < 1 {
			return r, Grant{Wait: time.Duration(math.Ceil((1 - r.Tokens) / r.Rate() * float64(time.Second))), changed: given}
		}
		g.Tokens = int(min(have, float64(max(q.Tokens, 1))))
		r.Tokens = max(0, r.Tokens-float64(g.Tokens))
	}
	if h, held := r.Holders[q.Agent]; held && !slot && q.Lease > 0 && now.Add(q.Lease).After(h.Until) {
		r = r.Renew(now, q.Agent, q.Lease) // the agent's spare slots stay leased while it takes tokens
	}
	if slot {
		hs := make(map[string]Holder, len(r.Holders)+1)
		for a, h := range r.Holders {
			hs[a] = h
		}
		h := hs[q.Agent]
		h.Slots += 1 + g.Extra
		if until := now.Add(q.Lease); until.After(h.Until) {
			h.Until = until
		}
		hs[q.Agent] = h
		r.Holders = hs
		if !q.More {
			r = r.satisfied(q.Agent)
		}
	}
	r.Stats.Calls += g.Tokens
	return r, g
}

// GiveBack puts n tokens that a take leased and no call used back into
// the bucket (up to its burst) and out of the calls counted (this
// minute's, then the last one's). The bucket is then as if they had never
// been taken: whatever refilled while they were out is capped at the
// burst as it would have been, so a limit never grants more for it.
func (r Record) GiveBack(n int) Record {
	if n <= 0 {
		return r
	}
	if r.LimitConfig.Rate > 0 {
		r.Tokens = min(r.burst(), r.Tokens+float64(n))
	}
	cur := min(n, r.Stats.Calls)
	r.Stats.Calls -= cur
	r.Stats.PrevCalls -= min(n-cur, r.Stats.PrevCalls)
	return r
}

// Outcome is how a call that held a limit ended, for adaptation.
type Outcome int

// Outcomes.
const (
	// Neutral says nothing about the dependency (the item's own fault, a
	// cancelled run).
	Neutral Outcome = iota
	Success
	// Overload is rate_limit, server_error, timeout or a handler's
	// retry.After.
	Overload
)

// OutcomeOf is what a call's failure f (nil: it succeeded) says about the
// limited dependency: overload for rate_limit, server_error and timeout
// (the built-in matchers' classes) and a handler's retry.After; nothing
// for the item's own failures.
func OutcomeOf(f *retry.Failure) Outcome {
	switch {
	case f == nil:
		return Success
	case f.TimedOut:
		return Overload
	}
	if _, ok := retry.AfterDelay(f.Err); ok {
		return Overload
	}
	switch retry.Classify(*f) {
	case messages.MatchRateLimit, messages.MatchServerError, messages.MatchTimeout:
		return Overload
	}
	return Neutral
}

// Release decides the end of a call at now: slots of the agent's are
// given back and the outcome applied.
func (r Record) Release(now time.Time, agent string, slots int, o Outcome, lease time.Duration) Record {
	r = r.normalize(now)
	if h, ok := r.Holders[agent]; ok && slots > 0 {
		hs := make(map[string]Holder, len(r.Holders))
		for a, h := range r.Holders {
			hs[a] = h
		}
		if h.Slots -= slots; h.Slots > 0 {
			if until := now.Add(lease); until.After(h.Until) {
				h.Until = until
			}
			hs[agent] = h
		} else {
			delete(hs, agent)
		}
		r.Holders = hs
	}
	switch o {
	case Success:
		r.Stats.Successes++
		if r.Adaptive && r.Current > 0 {
			rate := r.LimitConfig.Rate.PerSecond()
			if r.Current += rate * RaiseFraction; r.Current >= rate {
				r.Current = 0
			}
		}
	case Overload:
		r.Stats.Overloads++
		if r.Adaptive && (r.CutAt.IsZero() || now.Sub(r.CutAt) >= CutInterval) {
			rate := r.LimitConfig.Rate.PerSecond()
			r.Current = max(r.Rate()*CutFactor, rate*FloorFraction)
			r.CutAt = now
			r.Tokens = min(r.Tokens, r.burst())
		}
	}
	return r
}

// Handover decides the end of agent's call holding a slot at now, when
// another of its calls waits for one: the slot stays the agent's (for the
// waiting call, its lease renewed) unless another agent waits holding
// fewer (Behind), when it goes back to the limit. The outcome is applied
// either way.
func (r Record) Handover(now time.Time, agent string, o Outcome, lease time.Duration) (next Record, kept bool) {
	r = r.Release(now, agent, 0, o, lease)
	if r.held(now, agent) > 0 && !r.Behind(now, agent) {
		return r.Renew(now, agent, lease), true
	}
	return r.Release(now, agent, 1, Neutral, lease), false
}

// withWriter records write id in the record.
func (r Record) withWriter(id string) Record {
	r.Writers = append(slices.Clone(r.Writers[max(0, len(r.Writers)-keepWriters+1):]), id)
	return r
}

// Renew extends agent's lease on its slots to now+lease.
func (r Record) Renew(now time.Time, agent string, lease time.Duration) Record {
	r = r.normalize(now)
	h, ok := r.Holders[agent]
	if !ok || !now.Add(lease).After(h.Until) {
		return r
	}
	hs := make(map[string]Holder, len(r.Holders))
	for a, h := range r.Holders {
		hs[a] = h
	}
	h.Until = now.Add(lease)
	hs[agent] = h
	r.Holders = hs
	return r
}
