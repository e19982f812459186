package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func attempts(n, msgBytes int) []messages.Attempt {
	out := make([]messages.Attempt, n)
	for i := range out {
		out[i] = messages.Attempt{Attempt: i + 1, Time: time.Unix(int64(i), 0).UTC(), ErrorClass: "error",
			Message: fmt.Sprintf("attempt %d %s", i+1, strings.Repeat("m", msgBytes))}
	}
	return out
}

func TestEncodeDLQEntryFits(t *testing.T) {
	payload := json.RawMessage(`{"blob":"` + strings.Repeat("x", 900_000) + `"}`)
	e := &messages.DLQEntry{JobID: "j", ItemID: "i", Payload: payload, Attempts: attempts(100, 2000),
		Reason: messages.ReasonAttempts, Error: strings.Repeat("e", 2000)}
	for _, tc := range []struct {
		name        string
		max         int
		dropped     int // attempts dropped (-1: any but all)
		shortTexts  bool
		noAttempts  bool
		truncPaylod bool
	}{
		{"fits as is", 2 << 20, 0, false, false, false},
		{"oldest attempts dropped", 1_000_000, -1, false, false, false},
		{"texts shortened too", 902_000, 99, true, false, false},
		{"payload cut last", 100_000, 100, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := EncodeDLQEntry(e, tc.max)
			if err != nil {
				t.Fatal(err)
			}
			if len(data) > tc.max {
				t.Fatalf("%d bytes, limit %d", len(data), tc.max)
			}
			var got messages.DLQEntry
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatal(err)
			}
			if got.AttemptsDropped+len(got.Attempts) != 100 {
				t.Fatalf("dropped %d + kept %d != 100", got.AttemptsDropped, len(got.Attempts))
			}
			switch {
			case tc.dropped == -1 && (got.AttemptsDropped == 0 || len(got.Attempts) < 2):
				t.Fatalf("want some (not all but one) attempts dropped, dropped %d", got.AttemptsDropped)
			case tc.dropped >= 0 && got.AttemptsDropped != tc.dropped:
				t.Fatalf("dropped %d, want %d", got.AttemptsDropped, tc.dropped)
			}
			if !tc.noAttempts && got.Attempts[len(got.Attempts)-1].Attempt != 100 {
				t.Fatal("the newest attempt must be kept")
			}
			if tc.shortTexts != (len(got.Error) <= shortTextBytes) {
				t.Fatalf("error is %d bytes", len(got.Error))
			}
			if got.PayloadTruncated != tc.truncPaylod {
				t.Fatalf("payload_truncated = %v", got.PayloadTruncated)
			}
			if !tc.truncPaylod && string(got.Payload) != string(payload) {
				t.Fatal("the payload must be whole")
			}
			if got.ItemID != "i" || got.JobID != "j" {
				t.Fatal("ids must be whole")
			}
		})
	}
	if _, err := EncodeDLQEntry(e, 100); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("an impossible limit: err = %v, want ErrTooLarge", err)
	}
	if len(e.Attempts) != 100 || len(e.Error) != 2000 {
		t.Fatal("the entry itself must not change")
	}
}

func TestEncodeWorkItemDropsOldestHistory(t *testing.T) {
	wi := &WorkItem{JobID: "j", ItemID: "i", Payload: json.RawMessage(`{}`), History: attempts(100, 1000), HistoryDropped: 5}
	data, err := EncodeWorkItem(wi, 50_000)
	if err != nil {
		t.Fatal(err)
	}
	var got WorkItem
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(data) > 50_000 || len(got.History) == 0 || got.History[len(got.History)-1].Attempt != 100 {
		t.Fatalf("%d bytes, %d attempts kept", len(data), len(got.History))
	}
	if got.HistoryDropped != 5+100-len(got.History) {
		t.Fatalf("history_dropped = %d", got.HistoryDropped)
	}
	big := &WorkItem{JobID: "j", ItemID: "i", Payload: json.RawMessage(`"` + strings.Repeat("x", 1000) + `"`)}
	if _, err := EncodeWorkItem(big, 500); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
}

func TestEncodeItemStateFits(t *testing.T) {
	st := &ItemState{JobID: "j", ItemID: strings.Repeat("i", 800_000), History: attempts(100, 2000),
		Outputs: []string{strings.Repeat("a", 4096), strings.Repeat("b", 4096)}}
	data, err := EncodeItemState(st, 900_000)
	if err != nil {
		t.Fatal(err)
	}
	var got ItemState
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(data) > 900_000 || got.ItemID != st.ItemID || got.HistoryDropped+len(got.History) != 100 {
		t.Fatalf("%d bytes, kept %d attempts, dropped %d", len(data), len(got.History), got.HistoryDropped)
	}
	small, err := EncodeItemState(st, 805_000)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(small, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Outputs) != 2 || got.Outputs[0] != "" || !strings.HasPrefix(got.Outputs[1], "b") {
		t.Fatalf("outputs: only the last is kept, got %d", len(got.Outputs))
	}
}

func TestEncodeResultKeepsTails(t *testing.T) {
	r := &messages.Result{JobID: "j", ItemID: "i", Outcome: messages.OutcomeSucceeded, Output: strings.Repeat("o", 1<<20) + "END", Error: "boom"}
	data, err := EncodeResult(r, 10_000)
	if err != nil {
		t.Fatal(err)
	}
	var got messages.Result
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(data) > 10_000 || !strings.HasSuffix(got.Output, "END") || got.Error != "boom" {
		t.Fatalf("%d bytes, output tail %q, error %q", len(data), got.Output[max(0, len(got.Output)-3):], got.Error)
	}
}

func TestShortID(t *testing.T) {
	if got := ShortID("abc"); got != `"abc"` {
		t.Fatal(got)
	}
	got := ShortID(strings.Repeat("é", 100))
	if !strings.HasSuffix(got, "… (200 bytes)") || len(got) > 100 {
		t.Fatal(got)
	}
}
