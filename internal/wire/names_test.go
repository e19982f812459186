package wire_test

import (
	"strings"
	"testing"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// subjectKinds pairs each builder with its parser.
var subjectKinds = []struct {
	kind  string
	build func(n messages.Names, a, b string) string
	parse func(n messages.Names, s string) (string, string, bool)
}{
	{"work", messages.Names.WorkSubject, wire.ParseWork},
	{"results", messages.Names.ResultSubject, wire.ParseResult},
	{"dlq", messages.Names.DLQSubject, wire.ParseDLQ},
}

func TestParseRoundTripsTheBuilders(t *testing.T) {
	long := strings.Repeat("j", messages.MaxTokenLen)
	for _, prefix := range []string{"", "acme-1", "work"} {
		n := messages.MustNames(prefix)
		for _, k := range subjectKinds {
			for _, tc := range [][2]string{{"default", "nightly"}, {messages.CoordinatorOrigin, "job_1"}, {"a", long}, {"results", "dlq"}} {
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
	n := messages.MustNames("fleet")
	for _, s := range []string{
		"", "fleet", "fleet.work", "fleet.work.", "fleet.work.p", "fleet.work.p.", "fleet.work..j",
		"fleet.work.p.j.extra", "other.work.p.j", "fleetx.work.p.j", "fleet.workx.p.j", "FLEET.work.p.j",
		"fleet.events.j.started", "fleet.jobs.submit", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.FLEET_WORK.agents-p",
	} {
		if p, j, ok := wire.ParseWork(n, s); ok {
			t.Errorf("ParseWork(%q) = (%q, %q), want not a work subject", s, p, j)
		}
	}
	if got := wire.Origin(n, "fleet.results.p.j"); got != "p" {
		t.Errorf("Origin of a result subject = %q", got)
	}
	if got := wire.Origin(n, "fleet.dlq._coordinator.j"); got != messages.CoordinatorOrigin {
		t.Errorf("Origin of a DLQ subject = %q", got)
	}
	if got := wire.Origin(n, "fleet.work.p.j"); got != "" {
		t.Errorf("Origin of a work subject = %q, want none", got)
	}
}

func TestHeldSubjects(t *testing.T) {
	n := messages.MustNames("fleet")
	subj := wire.HeldSubject(n, "gpu", "job-1", "a.b/c")
	if job, ok := wire.ParseHeld(n, "gpu", subj); !ok || job != "job-1" {
		t.Fatalf("ParseHeld(%q) = %q, %v", subj, job, ok)
	}
	if _, ok := wire.ParseHeld(n, "gpu", wire.ParkSubject(n, "gpu", "job-1", "a.b/c")); ok {
		t.Fatal("a parked retry's schedule is not a held copy")
	}
	if _, ok := wire.ParseHeld(n, "cpu", subj); ok {
		t.Fatal("another pool's subject")
	}
	if got, want := wire.HeldFilter(n, "gpu", "*"), "fleet.parked.gpu.at.*.*.held"; got != want {
		t.Fatalf("HeldFilter = %q, want %q", got, want)
	}
	// The pool's agents may publish it, and the job's purge takes it.
	if want := "fleet.parked.gpu.at."; subj[:len(want)] != want {
		t.Fatalf("%q is not under the agents' park subjects", subj)
	}
	if f := wire.JobParkFilters(n, "gpu", "job-1")[0]; f != "fleet.parked.gpu.at.job-1.>" {
		t.Fatalf("JobParkFilters = %q", f)
	}
}

// The zero Names and a literal one name the same resources as NewNames.
func TestNamesLiteral(t *testing.T) {
	for _, tc := range []struct {
		n                    messages.Names
		jobs, bucket, legacy string
	}{
		{messages.Names{}, "FLEET_JOBS", "fleet_jobs", "FLEET_PARK"},
		{messages.MustNames(""), "FLEET_JOBS", "fleet_jobs", "FLEET_PARK"},
		{messages.Names{Prefix: "acme"}, "ACME_JOBS", "acme_jobs", "ACME_PARK"},
		{messages.MustNames("acme"), "ACME_JOBS", "acme_jobs", "ACME_PARK"},
	} {
		if got := tc.n.JobsStream(); got != tc.jobs {
			t.Errorf("%+v.JobsStream() = %q, want %q", tc.n, got, tc.jobs)
		}
		if got := tc.n.JobsBucket(); got != tc.bucket {
			t.Errorf("%+v.JobsBucket() = %q, want %q", tc.n, got, tc.bucket)
		}
		if got := wire.LegacyParkStream(tc.n); got != tc.legacy {
			t.Errorf("LegacyParkStream(%+v) = %q, want %q", tc.n, got, tc.legacy)
		}
	}
	src, dest := wire.ParkDueTransform(messages.Names{}, "gpu")
	if src != "fleet.parked.gpu.due.*" || dest != "fleet.work.gpu.{{wildcard(1)}}" {
		t.Errorf("ParkDueTransform = %q, %q", src, dest)
	}
	if got := wire.MaxDeliveriesAdvisory(messages.Names{Prefix: "acme"}, "*"); got != "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.ACME_WORK.*" {
		t.Errorf("MaxDeliveriesAdvisory = %q", got)
	}
}

// FuzzParseSubjects: what a parser accepts, the builder builds back.
func FuzzParseSubjects(f *testing.F) {
	for _, s := range []string{"fleet.work.p.j", "fleet.results._coordinator.j", "fleet.dlq.p.j.x", "acme.work..j"} {
		f.Add("", s)
		f.Add("acme", s)
	}
	f.Fuzz(func(t *testing.T, prefix, subject string) {
		n, err := messages.NewNames(prefix)
		if err != nil {
			return
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
