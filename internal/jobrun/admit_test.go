package jobrun

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/expand"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// A record over the limit sheds its error report, least frequent
// signatures first, and keeps every failure counted.
func TestFitRecordShedsTheReport(t *testing.T) {
	t.Parallel()
	rec := &wire.JobRecord{Spec: &messages.JobSpec{ID: "j"}, Status: messages.JobStatus{ID: "j", State: messages.StateRunning}}
	var total int64
	for i := range 200 {
		rec.Status.Errors = append(rec.Status.Errors, messages.ErrorSummary{
			Signature: fmt.Sprintf("%016x", i), Message: strings.Repeat("m", 1000), Count: int64(200 - i),
			Items: []string{strings.Repeat("i", 200)},
		})
		total += int64(200 - i)
	}
	rec.Status.ErrorsOther = 7
	full, err := json.Marshal(rec)
	require.NoError(t, err)
	for _, max := range []int{len(full), 150_000, 20_000, 1_000} {
		data, err := fitRecord(rec, max)
		require.NoError(t, err, "max %d", max)
		require.LessOrEqual(t, len(data), max)
		var got wire.JobRecord
		require.NoError(t, json.Unmarshal(data, &got))
		sum := got.Status.ErrorsOther
		for i, e := range got.Status.Errors {
			sum += e.Count
			require.Equal(t, rec.Status.Errors[i].Signature, e.Signature, "the most frequent are kept")
		}
		require.Equal(t, total+7, sum, "max %d: every failure still counted", max)
	}
	require.Len(t, rec.Status.Errors[0].Items, 1, "the record itself is not modified")
	_, err = fitRecord(&wire.JobRecord{Spec: &messages.JobSpec{Name: strings.Repeat("n", 5000)}}, 1000)
	require.Error(t, err, "what cannot be shed is reported")
}

func TestBoundProblems(t *testing.T) {
	t.Parallel()
	ps := make([]messages.FieldError, 250)
	for i := range ps {
		ps[i] = messages.FieldError{Field: fmt.Sprintf("items[%d]", i), Message: strings.Repeat("x", 5000)}
	}
	got := boundProblems(ps)
	require.Len(t, got, maxProblems+1)
	require.Equal(t, "… and 150 more problems", got[maxProblems].Message)
	require.Len(t, got[0].Message, maxProblemBytes+len("…"))
	e := invalidSpec(ps)
	require.Equal(t, "items[0]", e.Field)
	require.True(t, strings.HasSuffix(e.Message, "(and 100 more)"), e.Message)
}

func TestCountProblemPaths(t *testing.T) {
	t.Parallel()
	itemErr := &expand.ItemError{Index: 17, ID: "abc", Err: errors.New("too big")}
	inline := &messages.JobSpec{Items: []json.RawMessage{[]byte(`1`)}}
	require.Equal(t, messages.FieldError{Field: "items[17]", Message: "too big"}, countProblem(inline, itemErr))
	input := &messages.JobSpec{Input: "x.json"}
	require.Equal(t, messages.FieldError{Field: "input", Message: `item 17 (id "abc"): too big`}, countProblem(input, itemErr))
	byIndex := &expand.ItemError{Index: 3, ID: "3", Err: errors.New("bad")}
	require.Equal(t, "item 3: bad", countProblem(input, byIndex).Message, "an index id is not repeated")
	require.Equal(t, "json_path", countProblem(input, fmt.Errorf("x: %w", expand.ErrPathTooCostly)).Field)
	require.Equal(t, "group_by", countProblem(input, fmt.Errorf("x: %w", expand.ErrTooManyGroups)).Field)
	require.Equal(t, "input", countProblem(input, errors.New("unreadable")).Field)
}

// The Nats-Msg-Id of a submission: identical specs share it, a corrected
// spec or a resubmission after a rejection does not.
func TestSubmissionID(t *testing.T) {
	t.Parallel()
	a := submissionID("j", []byte(`{"id":"j","x":1}`), 0)
	require.Equal(t, a, submissionID("j", []byte(`{"id":"j","x":1}`), 0))
	require.NotEqual(t, a, submissionID("j", []byte(`{"id":"j","x":2}`), 0))
	require.NotEqual(t, a, submissionID("j", []byte(`{"id":"j","x":1}`), 5))
	require.True(t, strings.HasPrefix(a, "j."))
}

func TestWorkSizeBoundsTheMessage(t *testing.T) {
	t.Parallel()
	it := expand.Item{Index: 123456, ID: "id \"with\" <escapes> & \x01", Group: "eu", Raw: json.RawMessage(`{"a": [1, 2, 3]}`)}
	wi := wire.WorkItem{JobID: "job-1", ItemID: it.ID, Index: it.Index, Group: it.Group, Payload: it.Raw,
		CorrelationID: "job-1:123456", Generation: 0}
	body, err := json.Marshal(&wi)
	require.NoError(t, err)
	msgID := wire.WorkMsgID("job-1", it.ID, 0)
	require.GreaterOrEqual(t, workSize("job-1", it), len(body)+len("Nats-Msg-Id: ")+len(msgID))
}
