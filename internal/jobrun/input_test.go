package jobrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/internal/upload"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// startEchoAgent runs an agent whose handler "echo" returns the item, so a
// job's outputs show what its items held.
func startEchoAgent(t *testing.T, srv *fleettest.Server) *running {
	t.Helper()
	a := agent.New(srv.Connect(t), testhooks.WithAgent(agent.Config{ShutdownTimeout: time.Second}, testhooks.Agent{Provision: testProv})).
		Handle("echo", func(_ context.Context, c *agent.Call) (any, error) { return string(c.Item), nil })
	ctx, cancel := context.WithCancel(context.Background())
	p := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- a.Run(ctx) }()
	return p
}

// submitErr submits spec and returns the API error it must fail with.
func submitErr(t *testing.T, cl *Client, spec string) *messages.APIError {
	t.Helper()
	_, err := cl.Submit(context.Background(), []byte(spec))
	var ae *messages.APIError
	require.True(t, errors.As(err, &ae), "want an API error, got %v", err)
	return ae
}

// A remote submitter cannot make the coordinator read its own filesystem:
// with no input directory no file is read at all; with one, only files in
// it are, and "..", absolute paths and links out of it are refused with an
// error that names the field and reveals nothing about the filesystem, on
// the API and on the durable intake alike. A file inside it is served.
func TestFileInputsAreConfinedToTheInputDir(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	base := t.TempDir()
	inputs, secretDir := filepath.Join(base, "inputs"), filepath.Join(base, "secret")
	require.NoError(t, os.MkdirAll(inputs, 0o755))
	require.NoError(t, os.MkdirAll(secretDir, 0o755))
	secret := filepath.Join(secretDir, "creds.json")
	require.NoError(t, os.WriteFile(secret, []byte(`[{"id": "root", "password": "hunter2"}]`), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(inputs, "items.json"), []byte(`[{"id": "a", "v": 1}, {"id": "b", "v": 2}]`), 0o644))
	require.NoError(t, os.Symlink(secret, filepath.Join(inputs, "link.json")))

	job := func(id, input string) string {
		b, _ := json.Marshal(map[string]any{"id": id, "input": input, "agent_template": []any{map[string]any{"handler": "echo"}}})
		return string(b)
	}
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)

	// No input directory: file inputs are off.
	_, p := startCoord(t, srv, Config{})
	for _, ref := range []string{"items.json", "file://../secret/creds.json", secret} {
		ae := submitErr(t, cl, job("off", ref))
		require.Equal(t, messages.CodeInvalid, ae.Code)
		require.Equal(t, "input", ae.Field, "%+v", ae)
		require.Contains(t, ae.Message, "file inputs are not enabled")
		require.NotContains(t, ae.Message, base)
	}
	p.stop(t)

	_, p = startCoord(t, srv, Config{InputDir: inputs})
	defer p.stop(t)
	ag := startEchoAgent(t, srv)
	defer ag.stop(t)
	for _, ref := range []string{"file://../secret/creds.json", "../secret/creds.json", secret, "file://" + secret} {
		ae := submitErr(t, cl, job("escape", ref))
		require.Equal(t, "input", ae.Field, "%s: %+v", ref, ae)
		require.NotContains(t, ae.Message, base, ref)
		require.NotContains(t, ae.Message, "hunter2", ref)
	}

	// The durable intake applies the same check: the job is rejected.
	_, err = srv.JS().Publish(context.Background(), messages.MustNames("").JobsSubmitSubject(), []byte(job("durable-escape", "file://../secret/creds.json")))
	require.NoError(t, err)
	st := waitEnd(t, cl, "durable-escape")
	require.Equal(t, messages.StateRejected, st.State)
	require.Len(t, st.Problems, 1)
	require.Equal(t, "input", st.Problems[0].Field)

	// A link out of the directory passes the lexical check but is not
	// opened: rejected alike whether or not its target exists.
	_, err = cl.Submit(context.Background(), []byte(job("link", "link.json")))
	require.NoError(t, err)
	st = waitEnd(t, cl, "link")
	require.Equal(t, messages.StateRejected, st.State)
	require.Equal(t, "input", st.Problems[0].Field)
	require.Contains(t, st.Problems[0].Message, "not a readable file in the coordinator's input directory")
	require.NotContains(t, st.Problems[0].Message, base)
	require.NotContains(t, st.Problems[0].Message, "hunter2")

	// A file inside it is served.
	_, err = cl.Submit(context.Background(), []byte(job("inside", "file://items.json")))
	require.NoError(t, err)
	st = waitEnd(t, cl, "inside")
	require.Equal(t, messages.StateSucceeded, st.State, "%+v", st)
	require.EqualValues(t, 2, st.Succeeded)
}

// An uploaded input is copied into the inputs bucket when its job is
// accepted, after its digest is checked: overwriting or deleting the
// upload afterwards changes nothing for the job, a digest that does not
// match is refused with the field named, and inputs from any other bucket
// (another job's input, its reduce input) are refused.
func TestUploadsAreCopiedWhenTheJobIsAccepted(t *testing.T) {
	t.Parallel()
	srv := fleettest.RunServer(t)
	_, p := startCoord(t, srv, Config{})
	defer p.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	names := messages.MustNames("")
	cl, err := NewClient(srv.Conn(), "")
	require.NoError(t, err)
	uploads, err := srv.JS().ObjectStore(ctx, names.UploadsBucket())
	require.NoError(t, err)
	inputs, err := srv.JS().ObjectStore(ctx, names.InputsBucket())
	require.NoError(t, err)

	up, err := upload.PutBytes(ctx, srv.JS(), names.UploadsBucket(), "u1/items.json", []byte(`[{"id": "a"}, {"id": "b"}, {"id": "c"}]`))
	require.NoError(t, err)
	spec := func(id, ref, digest string) []byte {
		b, _ := json.Marshal(map[string]any{"id": id, "input": ref, "input_digest": digest,
			"agent_template": []any{map[string]any{"handler": "echo"}}})
		return b
	}
	_, err = cl.Submit(ctx, spec("copied", "objstore://fleet_uploads/u1/items.json", up.Digest))
	require.NoError(t, err)
	fleettest.WaitFor(t, 30*time.Second, func() error {
		st, err := cl.Status(ctx, "copied")
		if err != nil {
			return err
		}
		if st.State != messages.StateRunning && st.State != messages.StatePending {
			return nil
		}
		if st.Items != 3 {
			return errors.New("not accepted yet")
		}
		return nil
	})
	// The job reads its own copy; the upload is gone.
	rec, err := (&jobStore{kv: mustKV(t, srv, names.JobsBucket())}).get(ctx, "copied")
	require.NoError(t, err)
	require.Equal(t, "objstore://fleet_inputs/input/copied/items.json", rec.Spec.Input)
	require.Equal(t, up.Digest, rec.Spec.InputDigest)
	// The upload is deleted just after the record is stored, which status
	// may already show.
	fleettest.WaitFor(t, 10*time.Second, func() error {
		if _, err := uploads.GetInfo(ctx, "u1/items.json"); !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("the upload is still there (%v)", err)
		}
		return nil
	})
	info, err := inputs.GetInfo(ctx, "input/copied/items.json")
	require.NoError(t, err)
	require.Equal(t, up.Digest, info.Digest)

	// Re-uploading under the same name changes nothing for the job.
	_, err = upload.PutBytes(ctx, srv.JS(), names.UploadsBucket(), "u1/items.json", []byte(`[{"id": "evil"}]`))
	require.NoError(t, err)
	ag := startEchoAgent(t, srv)
	defer ag.stop(t)
	st := waitEnd(t, cl, "copied")
	require.Equal(t, messages.StateSucceeded, st.State)
	require.EqualValues(t, 3, st.Succeeded)

	// An upload replaced between upload and acceptance: the digest says so.
	_, err = cl.Submit(ctx, spec("replaced", "objstore://fleet_uploads/u1/items.json", up.Digest))
	require.NoError(t, err)
	st = waitEnd(t, cl, "replaced")
	require.Equal(t, messages.StateRejected, st.State)
	require.Equal(t, "input_digest", st.Problems[0].Field, "%+v", st.Problems)
	require.Contains(t, st.Problems[0].Message, "replaced after it was uploaded")

	// A missing upload.
	_, err = cl.Submit(ctx, spec("missing", "objstore://fleet_uploads/nope.json", ""))
	require.NoError(t, err)
	st = waitEnd(t, cl, "missing")
	require.Equal(t, messages.StateRejected, st.State)
	require.Equal(t, "input", st.Problems[0].Field)

	// Another job's input, or any bucket but the uploads bucket: refused
	// at submission.
	for _, ref := range []string{"objstore://fleet_inputs/input/copied/items.json", "objstore://fleet_inputs/reduce/x/0/map-results.json", "objstore://other/x.json"} {
		ae := submitErr(t, cl, string(spec("steal", ref, "")))
		require.Equal(t, "input", ae.Field, ref)
		require.Contains(t, ae.Message, "must be uploaded to the fleet_uploads bucket", ref)
	}
	// A malformed digest is a spec error.
	ae := submitErr(t, cl, string(spec("bad-digest", "objstore://fleet_uploads/u1/items.json", "md5=abc")))
	require.Equal(t, "input_digest", ae.Field)
}

func mustKV(t *testing.T, srv *fleettest.Server, bucket string) jetstream.KeyValue {
	t.Helper()
	kv, err := srv.JS().KeyValue(context.Background(), bucket)
	require.NoError(t, err)
	return kv
}

func TestCheckInputNamesTheField(t *testing.T) {
	t.Parallel()
	c := &Coordinator{cfg: Config{InputDir: "/srv/inputs"}, names: messages.MustNames("")}
	for _, tt := range []struct{ ref, want string }{
		{"items.json", ""},
		{"file://sub/items.json", ""},
		{"objstore://fleet_uploads/abc/items.json", ""},
		{"/etc/passwd", "absolute paths are not allowed"},
		{"a/../../b", `".." is not allowed`},
		{"https://example.com/x.json", "unsupported scheme"},
		{"objstore://fleet_jobs/x", "must be uploaded to the fleet_uploads bucket"},
	} {
		problems := c.checkInput(&messages.JobSpec{Input: tt.ref})
		if tt.want == "" {
			require.Empty(t, problems, tt.ref)
			continue
		}
		require.Len(t, problems, 1, tt.ref)
		require.Equal(t, "input", problems[0].Field)
		require.Contains(t, problems[0].Message, tt.want, tt.ref)
		require.False(t, strings.Contains(problems[0].Message, "/srv/inputs"), tt.ref)
	}
}
