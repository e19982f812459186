package jobspec

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A best_effort block without a deadline gets AD-44's 300 s; the operator
// sets other defaults and a cap, which the job's status records.
func TestBestEffortSettingsApply(t *testing.T) {
	tests := []struct {
		name          string
		s             BestEffortSettings
		req           messages.BestEffort
		wantMin       int
		wantDeadline  time.Duration
		wantClampedBy string
	}{
		{"out of the box", BestEffortSettings{}, messages.BestEffort{}, 1, 5 * time.Minute, ""},
		{"requested values kept", BestEffortSettings{}, messages.BestEffort{MinGroups: 3, Deadline: messages.MustDuration("1h")}, 3, time.Hour, ""},
		{"operator defaults", BestEffortSettings{MinGroupsDefault: 2, DeadlineDefault: 10 * time.Minute}, messages.BestEffort{}, 2, 10 * time.Minute, ""},
		{"requested deadline clamped", BestEffortSettings{DeadlineMax: time.Minute}, messages.BestEffort{Deadline: messages.MustDuration("10m")}, 1, time.Minute, ClampedByDeadlineMax},
		{"default under the cap", BestEffortSettings{DeadlineDefault: 30 * time.Second, DeadlineMax: time.Minute}, messages.BestEffort{}, 1, 30 * time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &messages.JobSpec{BestEffort: &tt.req}
			eff := WithDefaults(spec).BestEffort
			got := tt.s.Apply(spec.BestEffort, eff)
			if eff.MinGroups != tt.wantMin || eff.Deadline.D() != tt.wantDeadline || got != tt.wantClampedBy {
				t.Fatalf("Apply: min_groups %d, deadline %s, clamped by %q; want %d, %s, %q",
					eff.MinGroups, eff.Deadline, got, tt.wantMin, messages.Duration(tt.wantDeadline), tt.wantClampedBy)
			}
		})
	}
	if got := (BestEffortSettings{}).Apply(nil, nil); got != "" {
		t.Fatalf("no block: %q", got)
	}
}

func TestBestEffortSettingsFromEnvAndFlags(t *testing.T) {
	s, err := BestEffortSettingsFromEnv(envOf(nil))
	if err != nil || s != (BestEffortSettings{}) {
		t.Fatalf("nothing set: %+v, %v", s, err)
	}
	s, err = BestEffortSettingsFromEnv(envOf(map[string]string{
		"BEST_EFFORT_MIN_GROUPS_DEFAULT": "2", "BEST_EFFORT_DEADLINE_DEFAULT": "10m", "BEST_EFFORT_DEADLINE_MAX": "1h",
	}))
	if err != nil || s != (BestEffortSettings{MinGroupsDefault: 2, DeadlineDefault: 10 * time.Minute, DeadlineMax: time.Hour}) {
		t.Fatalf("ours: %+v, %v", s, err)
	}
	// AD-44's own names: a count of datacenters (groups here), seconds.
	s, err = BestEffortSettingsFromEnv(envOf(map[string]string{"BEST_EFFORT_DEFAULT_MIN_DCS": "2", "BEST_EFFORT_DEFAULT_DEADLINE_SECONDS": "300.0"}))
	if err != nil || s != (BestEffortSettings{MinGroupsDefault: 2, DeadlineDefault: 5 * time.Minute}) {
		t.Fatalf("AD-44's names: %+v, %v", s, err)
	}
	for env, want := range map[string]string{
		"BEST_EFFORT_MIN_GROUPS_DEFAULT=0":                                        `BEST_EFFORT_MIN_GROUPS_DEFAULT: "0" is not a number of groups >= 1`,
		"BEST_EFFORT_DEADLINE_DEFAULT=5 minutes":                                  `BEST_EFFORT_DEADLINE_DEFAULT: "5 minutes" is not a duration`,
		"BEST_EFFORT_DEFAULT_DEADLINE_SECONDS=-1":                                 `BEST_EFFORT_DEFAULT_DEADLINE_SECONDS: "-1" is not a number of seconds`,
		"BEST_EFFORT_DEADLINE_DEFAULT=10m,BEST_EFFORT_DEADLINE_MAX=5m":            "BEST_EFFORT_DEADLINE_DEFAULT (10m) exceeds BEST_EFFORT_DEADLINE_MAX (5m)",
		"BEST_EFFORT_DEADLINE_MAX=1m":                                             "BEST_EFFORT_DEADLINE_DEFAULT (5m) exceeds BEST_EFFORT_DEADLINE_MAX (1m)",
		"BEST_EFFORT_DEADLINE_DEFAULT=5m,BEST_EFFORT_DEFAULT_DEADLINE_SECONDS=60": "BEST_EFFORT_DEADLINE_DEFAULT (5m) and its alias BEST_EFFORT_DEFAULT_DEADLINE_SECONDS (1m) disagree",
	} {
		m := map[string]string{}
		for _, kv := range strings.Split(env, ",") {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
		if _, err := BestEffortSettingsFromEnv(envOf(m)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", env, err, want)
		}
	}

	// Flags override the environment.
	s, _ = BestEffortSettingsFromEnv(envOf(map[string]string{"BEST_EFFORT_DEADLINE_DEFAULT": "10m"}))
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	RegisterBestEffortFlags(fs, &s)
	if got := fs.Lookup("best-effort-deadline-default").Value.String(); got != "10m" {
		t.Fatalf("the flag shows the env value: %q", got)
	}
	if err := fs.Parse([]string{"--best-effort-min-groups-default=3", "--best-effort-deadline-max", "2h"}); err != nil {
		t.Fatal(err)
	}
	if s != (BestEffortSettings{MinGroupsDefault: 3, DeadlineDefault: 10 * time.Minute, DeadlineMax: 2 * time.Hour}) || s.Validate() != nil {
		t.Fatalf("flags: %+v", s)
	}
	if err := fs.Parse([]string{"--best-effort-deadline-max=soon"}); err == nil {
		t.Fatal("a bad duration flag was accepted")
	}
	err = BestEffortSettings{MinGroupsDefault: -1, DeadlineMax: -time.Second}.Validate()
	if err == nil || !strings.Contains(err.Error(), "BEST_EFFORT_MIN_GROUPS_DEFAULT: must be >= 1") || !strings.Contains(err.Error(), "BEST_EFFORT_DEADLINE_MAX: must not be negative") {
		t.Fatalf("negative settings, every one reported: %v", err)
	}
}
