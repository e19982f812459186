package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// requireAligned checks that every line of a table has as many lines as
// expected and starts each of the header's first n columns at the header's
// offset (in characters), after at least two spaces.
func requireAligned(t *testing.T, out string, lines, n int) {
	t.Helper()
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, rows, lines, out)
	var starts []int
	prev := ' '
	for i, r := range []rune(rows[0]) {
		if r != ' ' && prev == ' ' {
			starts = append(starts, i)
		}
		prev = r
	}
	require.GreaterOrEqual(t, len(starts), n, rows[0])
	for _, row := range rows[1:] {
		require.True(t, utf8.ValidString(row), row)
		require.NotContains(t, row, "\t")
		r := []rune(row)
		for _, s := range starts[1:n] {
			require.Greater(t, len(r), s, "%q is short", row)
			require.Equal(t, "  ", string(r[s-2:s]), "column at %d of %q", s, row)
			require.NotEqual(t, ' ', r[s], "column at %d of %q", s, row)
		}
	}
}

func TestJobListAlignsWideValues(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	jobs := []messages.JobStatus{
		{ID: "a", State: messages.StateRunning, Items: 3, SubmittedAt: at},
		{ID: strings.Repeat("long-job-id-", 10), State: messages.StateSucceeded, Items: 12_345_678, Succeeded: 12_345_678, Retries: 99, SubmittedAt: at},
		{ID: "b", State: messages.StateFailed, Items: 1, DeadLettered: 1, SubmittedAt: at},
	}
	var out bytes.Buffer
	printJobList(&out, jobs)
	requireAligned(t, out.String(), 4, 7)
	require.Contains(t, out.String(), jobs[1].ID, "a long job id is shown whole")
}

func TestDLQListAlignsWideValues(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	entry := func(seq uint64, job, item, sig, errText string) messages.DLQEntryRef {
		return messages.DLQEntryRef{Seq: seq, Entry: messages.DLQEntry{
			JobID: job, ItemID: item, Reason: messages.ReasonAttempts, ErrorClass: "network", Signature: sig,
			Error: errText, DeadLetteredAt: now.Add(-time.Hour), Attempts: []messages.Attempt{{}, {}},
		}}
	}
	page := &messages.DLQListReply{Entries: []messages.DLQEntryRef{
		entry(1, "j", "i", "abc", "boom"),
		// Item ids are any bytes: tabs, newlines, invalid UTF-8, and long.
		entry(123456789, strings.Repeat("job", 40), "tab\there\nnewline\xff"+strings.Repeat("é", 100), strings.Repeat("f", 64), "connection refused\n\tat line 2"),
		entry(3, "j", "ünïcødé", "abc", ""),
	}, More: true, NextSeq: 3}
	var out bytes.Buffer
	printDLQList(&out, page, now)
	text := out.String()
	require.True(t, strings.HasSuffix(text, "… more entries: fleetctl dlq list --after 3 (or --limit)\n"), text)
	requireAligned(t, strings.TrimSuffix(text, "… more entries: fleetctl dlq list --after 3 (or --limit)\n"), 4, 9)
	require.Contains(t, text, strings.Repeat("job", 40), "a long job id is shown whole")
	require.Contains(t, text, "tab here newline\uFFFD"+strings.Repeat("é", 40-17-1)+"…", "an item id is made safe and cut on a rune boundary")
	require.Contains(t, text, "connection refused at line 2")
}

func TestCut(t *testing.T) {
	t.Parallel()
	require.Equal(t, "abc", cut("abc", 3))
	require.Equal(t, "ab…", cut("abcd", 3))
	require.Equal(t, "éé…", cut("éééé", 3), "cut on a rune boundary")
	require.Equal(t, "a b c", cell("a\tb\nc"))
	require.Equal(t, "a\uFFFDb", cell("a\xffb"))
}

// Terminal escapes and Unicode format characters in user data cannot
// drive the terminal or reorder what a line shows.
func TestCellNeutralisesEscapesAndFormatCharacters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"ESC and BEL", "a\x1b[2Jb\x07c", "a [2Jb c"},
		{"C1 control", "a\u009bb", "a b"},
		{"right-to-left override", "invoice\u202Egpj.exe", "invoice\uFFFDgpj.exe"},
		{"bidi isolates and marks", "\u2066x\u2069\u200Fy\u061C", "\uFFFDx\uFFFD\uFFFDy\uFFFD"},
		{"zero-width and BOM", "a\u200Bb\uFEFFc\u00ADd", "a\uFFFDb\uFFFDc\uFFFDd"},
		{"line and paragraph separators", "a\u2028b\u2029c", "a\uFFFDb\uFFFDc"},
		{"ordinary text", "ünïcødé 日本 🙂", "ünïcødé 日本 🙂"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, cell(tc.in))
		})
	}
	var out bytes.Buffer
	printEntry(&out, &messages.DLQEntryRef{Seq: 1, Entry: messages.DLQEntry{JobID: "j", ItemID: "evil\u202Etxt.sh",
		Error: "boom\u2066", Payload: []byte(`"\u202E"`), Attempts: []messages.Attempt{{Message: "x\u202Ey", StepName: "s\u200B"}}}})
	require.NotContains(t, out.String(), "\u202E")
	require.NotContains(t, out.String(), "\u2066")
	require.NotContains(t, out.String(), "\u200B")
}
