package messages

import (
	"strings"
	"testing"
)

// subjectKinds pairs each builder with its parser.
var subjectKinds = []struct {
	kind  string
	build func(n Names, a, b string) string
	parse func(n Names, s string) (string, string, bool)
}{
	{"work", Names.WorkSubject, Names.ParseWork},
	{"results", Names.ResultSubject, Names.ParseResult},
	{"dlq", Names.DLQSubject, Names.ParseDLQ},
}

func TestParseRoundTripsTheBuilders(t *testing.T) {
	long := strings.Repeat("j", MaxTokenLen)
	for _, prefix := range []string{"", "acme-1", "work"} {
		n := MustNames(prefix)
		for _, k := range subjectKinds {
			for _, tc := range [][2]string{{"default", "nightly"}, {CoordinatorOrigin, "job_1"}, {"a", long}, {"results", "dlq"}} {
				subject := k.build(n, tc[0], tc[1])
				a, b, ok := k.parse(n, subject)
				if !ok || a != tc[0] || b != tc[1] {
					t.Errorf("%s %q: parsed (%q, %q, %v), want (%q, %q)", k.kind, subject, a, b, ok, tc[0], tc[1])
				}
				for _, other := range subjectKinds {
					if other.kind == k.kind {
						continue
					}
					if _, _, ok := other.parse(n, subject); ok {
						t.Errorf("%s subject %q parsed as %s", k.kind, subject, other.kind)
					}
				}
			}
		}
	}
}

func TestParseRefusesOtherSubjects(t *testing.T) {
	n := MustNames("fleet")
	for _, s := range []string{
		"", "fleet", "fleet.work", "fleet.work.", "fleet.work.p", "fleet.work.p.", "fleet.work..j",
		"fleet.work.p.j.extra", "other.work.p.j", "fleetx.work.p.j", "fleet.workx.p.j", "FLEET.work.p.j",
		"fleet.events.j.started", "fleet.jobs.submit", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.FLEET_WORK.agents-p",
	} {
		if p, j, ok := n.ParseWork(s); ok {
			t.Errorf("ParseWork(%q) = (%q, %q), want not a work subject", s, p, j)
		}
	}
	if got := n.Origin("fleet.results.p.j"); got != "p" {
		t.Errorf("Origin of a result subject = %q", got)
	}
	if got := n.Origin("fleet.dlq._coordinator.j"); got != CoordinatorOrigin {
		t.Errorf("Origin of a DLQ subject = %q", got)
	}
	if got := n.Origin("fleet.work.p.j"); got != "" {
		t.Errorf("Origin of a work subject = %q, want none", got)
	}
}

func TestParseEvent(t *testing.T) {
	for _, prefix := range []string{"fleet", "acme"} {
		n := MustNames(prefix)
		for _, tc := range [][3]string{{"nightly", EventMapEnded, ""}, {"j", EventBudget, "gpu"}, {"events", "x", "events"}} {
			subject := n.EventSubject(tc[0], tc[1])
			if tc[2] != "" {
				subject = n.AgentEventSubject(tc[2], tc[0], tc[1])
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
				back = n.AgentEventSubject(pool, job, typ)
			}
			if back != subject || strings.Contains(job, ".") || strings.Contains(typ, ".") {
				t.Fatalf("event %q: parsed (%q, %q, %q), built back %q", subject, job, typ, pool, back)
			}
		}
		for _, k := range subjectKinds {
			a, b, ok := k.parse(n, subject)
			if !ok {
				continue
			}
			if a == "" || b == "" || strings.Contains(a, ".") || strings.Contains(b, ".") {
				t.Fatalf("%s %q: parts (%q, %q)", k.kind, subject, a, b)
			}
			if back := k.build(n, a, b); back != subject {
				t.Fatalf("%s %q: parsed (%q, %q), built back %q", k.kind, subject, a, b, back)
			}
		}
	})
}
