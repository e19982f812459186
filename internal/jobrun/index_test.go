package jobrun

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func job(i int, state string) *messages.JobStatus {
	return &messages.JobStatus{
		ID: fmt.Sprintf("job-%04d", i), Name: fmt.Sprintf("nightly %d", i), Pool: []string{"default", "gpu"}[i%2],
		State: state, Items: 10, SubmittedAt: t0.Add(time.Duration(i) * time.Second),
		Groups: map[string]messages.GroupStatus{"a": {Items: 10}}, Errors: []messages.ErrorSummary{{Signature: "x"}},
	}
}

// pageAll follows next_cursor to the end and returns the ids in order.
func pageAll(t *testing.T, x *jobIndex, req messages.ListRequest) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10000, "paging does not end")
		r, err := x.list(req)
		require.NoError(t, err)
		for _, j := range r.Jobs {
			ids = append(ids, j.ID)
		}
		if r.NextCursor == "" {
			return ids
		}
		req.Cursor = r.NextCursor
	}
}

func TestIndexPagesNewestFirstExactlyOnce(t *testing.T) {
	t.Parallel()
	x := newJobIndex()
	for i := range 250 {
		x.put(1, job(i, messages.StateSucceeded))
	}
	r, err := x.list(messages.ListRequest{Limit: 10})
	require.NoError(t, err)
	require.Len(t, r.Jobs, 10)
	require.Equal(t, "job-0249", r.Jobs[0].ID)
	require.Equal(t, 250, r.Total)
	require.Nil(t, r.Jobs[0].Groups, "summaries carry no groups")
	require.Nil(t, r.Jobs[0].Errors, "summaries carry no errors")

	ids := pageAll(t, x, messages.ListRequest{Limit: 7})
	require.Len(t, ids, 250)
	for i, id := range ids {
		require.Equal(t, fmt.Sprintf("job-%04d", 249-i), id)
	}

	// The default page size applies to an empty request.
	r, err = x.list(messages.ListRequest{})
	require.NoError(t, err)
	require.Len(t, r.Jobs, DefaultListLimit)
	require.NotEmpty(t, r.NextCursor)

	// An exactly full last page has no cursor.
	r, err = x.list(messages.ListRequest{Limit: 250})
	require.NoError(t, err)
	require.Len(t, r.Jobs, 250)
	require.Empty(t, r.NextCursor)
}

func TestIndexCursorSurvivesInsertsAndDeletes(t *testing.T) {
	t.Parallel()
	x := newJobIndex()
	for i := range 20 {
		x.put(1, job(i, messages.StateSucceeded))
	}
	r, err := x.list(messages.ListRequest{Limit: 5})
	require.NoError(t, err)
	require.Equal(t, "job-0015", r.Jobs[4].ID)
	// A newer job arrives and the page's last job is deleted: the next page
	// starts where the first ended anyway.
	x.put(1, job(100, messages.StateRunning))
	x.remove("job-0015", 2)
	r, err = x.list(messages.ListRequest{Limit: 5, Cursor: r.NextCursor})
	require.NoError(t, err)
	require.Equal(t, "job-0014", r.Jobs[0].ID)
	require.Equal(t, 20, r.Total)
}

func TestIndexStateFilterFollowsStateChanges(t *testing.T) {
	t.Parallel()
	x := newJobIndex()
	for i := range 30 {
		x.put(1, job(i, messages.StateRunning))
	}
	for i := 0; i < 30; i += 3 {
		x.put(2, job(i, messages.StateFailed))
	}
	// An older revision never replaces a newer one.
	x.put(1, job(0, messages.StateRunning))

	r, err := x.list(messages.ListRequest{State: messages.StateFailed, Limit: 4})
	require.NoError(t, err)
	require.Equal(t, 10, r.Total)
	require.Equal(t, map[string]int{messages.StateRunning: 20, messages.StateFailed: 10}, r.States)
	ids := pageAll(t, x, messages.ListRequest{State: messages.StateFailed, Limit: 4})
	require.Equal(t, []string{"job-0027", "job-0024", "job-0021", "job-0018", "job-0015", "job-0012", "job-0009", "job-0006", "job-0003", "job-0000"}, ids)
	require.Len(t, pageAll(t, x, messages.ListRequest{State: messages.StateRunning}), 20)

	// A state with no job.
	r, err = x.list(messages.ListRequest{State: messages.StateCancelled})
	require.NoError(t, err)
	require.Empty(t, r.Jobs)
	require.Zero(t, r.Total)
}

func TestIndexTextAndPoolFiltersAreBounded(t *testing.T) {
	t.Parallel()
	x := newJobIndex()
	x.scanLimit = 50
	for i := range 400 {
		x.put(1, job(i, messages.StateSucceeded))
	}
	// "nightly 7" matches 7, 70-79, 700+ (none): 11 jobs, spread out.
	ids := pageAll(t, x, messages.ListRequest{Text: "NIGHTLY 7", Limit: 100})
	require.Len(t, ids, 11)
	require.Equal(t, "job-0079", ids[0])
	require.Equal(t, "job-0007", ids[10])

	// A request examines at most scanLimit jobs: the first page of a rare
	// match is short and says where to go on.
	r, err := x.list(messages.ListRequest{Text: "nightly 7", Limit: 100})
	require.NoError(t, err)
	require.Empty(t, r.Jobs, "jobs 399..350 hold no match")
	require.NotEmpty(t, r.NextCursor)

	ids = pageAll(t, x, messages.ListRequest{Pool: "gpu", Limit: 1000})
	require.Len(t, ids, 200)
}

func TestIndexRejectsForeignCursors(t *testing.T) {
	t.Parallel()
	x := newJobIndex()
	for _, c := range []string{"!!", "bm90LWEtY3Vyc29y", encodeCursorRaw("12.bad id")} {
		_, err := x.list(messages.ListRequest{Cursor: c})
		require.ErrorIs(t, err, errBadCursor, c)
	}
}

func encodeCursorRaw(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// TestJobsListPagesFromTheIndex runs jobs.list against a coordinator whose
// jobs bucket holds records it did not write (written before it started,
// and while it runs), and a job it accepted itself.
func TestJobsListPagesFromTheIndex(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	ctx := context.Background()
	_, p := startCoord(t, srv, Config{})
	defer p.stop(t)
	kv, err := srv.JS().KeyValue(ctx, messages.MustNames("").JobsBucket())
	require.NoError(t, err)
	put := func(st *messages.JobStatus) {
		data, err := json.Marshal(wire.JobRecord{Status: *st, Spec: &messages.JobSpec{ID: st.ID}})
		require.NoError(t, err)
		_, err = kv.Put(ctx, st.ID, data)
		require.NoError(t, err)
	}
	for i := range 120 {
		put(job(i, []string{messages.StateSucceeded, messages.StateFailed}[i%2]))
	}
	client, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		r, err := client.ListPage(ctx, messages.ListRequest{})
		if err != nil {
			return err
		}
		if r.Total != 120 {
			return fmt.Errorf("total %d, want 120", r.Total)
		}
		return nil
	})

	var ids []string
	req := messages.ListRequest{Limit: 50, State: messages.StateFailed}
	for {
		r, err := client.ListPage(ctx, req)
		require.NoError(t, err)
		require.Equal(t, 60, r.Total)
		for _, j := range r.Jobs {
			require.Equal(t, messages.StateFailed, j.State)
			require.Nil(t, j.Groups)
			ids = append(ids, j.ID)
		}
		if r.NextCursor == "" {
			break
		}
		req.Cursor = r.NextCursor
	}
	require.Len(t, ids, 60)
	require.Equal(t, "job-0119", ids[0])

	// A job the coordinator accepts is listed as soon as the submit is
	// taken in (read-your-writes through the store), newest first.
	reply, err := client.Submit(ctx, []byte(`{"id": "fresh", "items": [{"id": "a"}], "agent_template": [{"handler": "noop"}]}`))
	require.NoError(t, err)
	fleettest.WaitFor(t, 10*time.Second, func() error {
		jobs, err := client.List(ctx, messages.ListRequest{Limit: 1})
		if err != nil {
			return err
		}
		if len(jobs) == 0 || jobs[0].ID != reply.JobID {
			return fmt.Errorf("newest job is %v", jobs)
		}
		return nil
	})

	// A deleted record leaves the listing.
	require.NoError(t, kv.Delete(ctx, "job-0119"))
	fleettest.WaitFor(t, 10*time.Second, func() error {
		r, err := client.ListPage(ctx, messages.ListRequest{State: messages.StateFailed, Limit: 1})
		if err != nil {
			return err
		}
		if r.Jobs[0].ID != "job-0117" || r.Total != 59 {
			return fmt.Errorf("newest failed job %s of %d", r.Jobs[0].ID, r.Total)
		}
		return nil
	})

	// Bad requests name the field.
	_, err = client.ListPage(ctx, messages.ListRequest{Limit: MaxListLimit + 1})
	requireAPIField(t, err, "limit")
	_, err = client.ListPage(ctx, messages.ListRequest{Cursor: "nope!"})
	requireAPIField(t, err, "cursor")
}

func requireAPIField(t *testing.T, err error, field string) {
	t.Helper()
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeBadRequest, ae.Code)
	require.Equal(t, field, ae.Field)
}
