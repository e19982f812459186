package messages

import (
	"testing"
)

func TestHeldSubjects(t *testing.T) {
	n := MustNames("fleet")
	subj := n.HeldSubject("gpu", "job-1", "a.b/c")
	if job, ok := n.ParseHeld("gpu", subj); !ok || job != "job-1" {
		t.Fatalf("ParseHeld(%q) = %q, %v", subj, job, ok)
	}
	if _, ok := n.ParseHeld("gpu", n.ParkSubject("gpu", "job-1", "a.b/c")); ok {
		t.Fatal("a parked retry's schedule is not a held copy")
	}
	if _, ok := n.ParseHeld("cpu", subj); ok {
		t.Fatal("another pool's subject")
	}
	if got, want := n.HeldFilter("gpu", "*"), "fleet.parked.gpu.at.*.*.held"; got != want {
		t.Fatalf("HeldFilter = %q, want %q", got, want)
	}
	// The pool's agents may publish it, and the job's purge takes it.
	if want := "fleet.parked.gpu.at."; subj[:len(want)] != want {
		t.Fatalf("%q is not under the agents' park subjects", subj)
	}
	if f := n.JobParkFilters("gpu", "job-1")[0]; f != "fleet.parked.gpu.at.job-1.>" {
		t.Fatalf("JobParkFilters = %q", f)
	}
}
