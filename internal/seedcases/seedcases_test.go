package seedcases

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// spell writes delays as the docs do: "1s 2s 500ms 60s".
func spell(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		if d%time.Second == 0 {
			parts[i] = strconv.FormatInt(int64(d/time.Second), 10) + "s"
		} else {
			parts[i] = strconv.FormatInt(d.Milliseconds(), 10) + "ms"
		}
	}
	return strings.Join(parts, " ")
}

// The differences table of docs/retries.md is true of the timelines: each
// timeline that comes out differently names a row of it, and that row shows
// the document's numbers and ours.
func TestDocsTableShowsEveryDifference(t *testing.T) {
	data, err := os.ReadFile("../../docs/retries.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## 10. Differences from the source documents\n")
	if !ok {
		t.Fatal(`docs/retries.md has no "## 10. Differences from the source documents"`)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| difference ") {
			continue
		}
		cells := strings.Split(line, " | ")
		rows[strings.TrimPrefix(cells[0], "| ")] = line
	}
	for _, tl := range Timelines() {
		if tl.Difference == "" {
			continue
		}
		row, ok := rows[tl.Difference]
		if !ok {
			t.Errorf("%s: no row %q in the table", tl.Name(), tl.Difference)
			continue
		}
		if !strings.Contains(row, spell(tl.SeedDelays)) {
			t.Errorf("%s: row %q does not show the document's %s", tl.Name(), tl.Difference, spell(tl.SeedDelays))
		}
		if !strings.Contains(row, spell(tl.Delays)) {
			t.Errorf("%s: row %q does not show ours, %s", tl.Name(), tl.Difference, spell(tl.Delays))
		}
	}
}

// A timeline that is the document's has the document's numbers.
func TestTimelinesAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, tl := range Timelines() {
		if seen[tl.Name()] {
			t.Errorf("two timelines named %q", tl.Name())
		}
		seen[tl.Name()] = true
		same := spell(tl.SeedDelays) == spell(tl.Delays)
		if same != (tl.Difference == "") {
			t.Errorf("%s: the document's %s, ours %s, difference %q", tl.Name(), spell(tl.SeedDelays), spell(tl.Delays), tl.Difference)
		}
		if tl.StoppedBy == "" || tl.Config == "" {
			t.Errorf("%s: incomplete", tl.Name())
		}
	}
}
