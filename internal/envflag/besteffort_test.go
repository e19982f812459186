package envflag

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jetfleet/jetfleet/pkg/jobspec"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestBestEffortSettingsFromEnvAndFlags(t *testing.T) {
	s, err := BestEffortFromEnv(envOf(nil))
	if err != nil || s != (jobspec.BestEffortSettings{}) {
		t.Fatalf("nothing set: %+v, %v", s, err)
	}
	s, err = BestEffortFromEnv(envOf(map[string]string{
		"BEST_EFFORT_MIN_GROUPS_DEFAULT": "2", "BEST_EFFORT_DEADLINE_DEFAULT": "10m", "BEST_EFFORT_DEADLINE_MAX": "1h",
	}))
	if err != nil || s != (jobspec.BestEffortSettings{MinGroupsDefault: 2, DeadlineDefault: 10 * time.Minute, DeadlineMax: time.Hour}) {
		t.Fatalf("ours: %+v, %v", s, err)
	}
	// AD-44's own names: a count of datacenters (groups here), seconds.
	s, err = BestEffortFromEnv(envOf(map[string]string{"BEST_EFFORT_DEFAULT_MIN_DCS": "2", "BEST_EFFORT_DEFAULT_DEADLINE_SECONDS": "300.0"}))
	if err != nil || s != (jobspec.BestEffortSettings{MinGroupsDefault: 2, DeadlineDefault: 5 * time.Minute}) {
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
		if _, err := BestEffortFromEnv(envOf(m)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", env, err, want)
		}
	}

	// Flags override the environment.
	s, _ = BestEffortFromEnv(envOf(map[string]string{"BEST_EFFORT_DEADLINE_DEFAULT": "10m"}))
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	RegisterBestEffort(fs, &s)
	if got := fs.Lookup("best-effort-deadline-default").Value.String(); got != "10m" {
		t.Fatalf("the flag shows the env value: %q", got)
	}
	if err := fs.Parse([]string{"--best-effort-min-groups-default=3", "--best-effort-deadline-max", "2h"}); err != nil {
		t.Fatal(err)
	}
	if s != (jobspec.BestEffortSettings{MinGroupsDefault: 3, DeadlineDefault: 10 * time.Minute, DeadlineMax: 2 * time.Hour}) || s.Validate() != nil {
		t.Fatalf("flags: %+v", s)
	}
	if err := fs.Parse([]string{"--best-effort-deadline-max=soon"}); err == nil {
		t.Fatal("a bad duration flag was accepted")
	}
	err = jobspec.BestEffortSettings{MinGroupsDefault: -1, DeadlineMax: -time.Second}.Validate()
	if err == nil || !strings.Contains(err.Error(), "BEST_EFFORT_MIN_GROUPS_DEFAULT: must be >= 1") || !strings.Contains(err.Error(), "BEST_EFFORT_DEADLINE_MAX: must not be negative") {
		t.Fatalf("negative settings, every one reported: %v", err)
	}
}
