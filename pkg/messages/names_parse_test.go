package messages

import (
	"strings"
	"testing"
)

func TestParseEvent(t *testing.T) {
	for _, prefix := range []string{"fleet", "acme"} {
		n := MustNames(prefix)
		for _, tc := range [][3]string{{"nightly", EventMapEnded, ""}, {"j", EventBudget, "gpu"}, {"events", "x", "events"}} {
			subject := n.EventSubject(tc[0], tc[1])
			if tc[2] != "" {
				subject = n.EventSubject(tc[0], tc[1]) + "." + tc[2] // an agent's (internal/wire.AgentEventSubject)
			}
			job, typ, pool, ok := n.ParseEvent(subject)
			if !ok || job != tc[0] || typ != tc[1] || pool != tc[2] {
				t.Errorf("%q: parsed (%q, %q, %q, %v), want %q", subject, job, typ, pool, ok, tc)
			}
		}
	}
	n := MustNames("fleet")
	for _, s := range []string{"fleet.events", "fleet.events.j", "fleet.events.j.", "fleet.events..t", "fleet.events.j.t.", "fleet.events.j.t.p.x", "fleet.work.j.t", "other.events.j.t"} {
		if job, typ, pool, ok := n.ParseEvent(s); ok {
			t.Errorf("ParseEvent(%q) = (%q, %q, %q), want not an event subject", s, job, typ, pool)
		}
	}
}

// Whatever the subject, a parser accepts it only if the builder gives it
// back from the parts.
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{"fleet.work.p.j", "fleet.results._coordinator.j", "fleet.dlq.p.j.k", "fleet.work..", "x", "fleet.events.j.map_ended", "fleet.events.j.budget.p"} {
		f.Add("fleet", s)
	}
	f.Fuzz(func(t *testing.T, prefix, subject string) {
		n, err := NewNames(prefix)
		if err != nil {
			return
		}
		if job, typ, pool, ok := n.ParseEvent(subject); ok {
			back := n.EventSubject(job, typ)
			if pool != "" {
				back = n.EventSubject(job, typ) + "." + pool
			}
			if back != subject || strings.Contains(job, ".") || strings.Contains(typ, ".") {
				t.Fatalf("event %q: parsed (%q, %q, %q), built back %q", subject, job, typ, pool, back)
			}
		}
	})
}
