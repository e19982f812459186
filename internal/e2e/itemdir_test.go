package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/testhooks"
	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
)

// Each item runs in a directory of its own: six items on one agent, all
// in flight at once (each waits until all six have written their
// out.json), each read back its own file; $PWD, $ITEM_WORKDIR and
// ${item_workdir} name the directory; a step's working_dir is under it.
// The directories are gone when the items end, except the failed item's,
// kept for inspection.
func TestItemDirectories(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	work, shared := t.TempDir(), t.TempDir()
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 8, WorkDir: work}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	spec := `{"id": "item-dirs", "items": [{"id": "i1"}, {"id": "i2"}, {"id": "i3"}, {"id": "i4"}, {"id": "i5"}, {"id": "bad"}],
		"agent_template": [
			{"shell": "echo ${item_id} > out.json && mkdir sub && touch ` + shared + `/${item_id} && n=0 && while [ $(ls ` + shared + ` | wc -l) -lt 6 ]; do n=$((n+1)); [ $n -lt 600 ] || exit 9; sleep 0.05; done"},
			{"shell": "test \"$(cat out.json)\" = ${item_id} && test \"$PWD\" = ${item_workdir} && test \"$ITEM_WORKDIR\" = \"$PWD\""},
			{"shell": "test \"$(cat ../out.json)\" = ${item_id} && echo here > mark", "working_dir": "sub"},
			{"shell": "test -f sub/mark && test ${item_id} != bad", "retry_config": {"attempts": 1}}
		]}`
	id := submit(t, cl, spec)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 5, st.Succeeded, "%+v", st)
	require.EqualValues(t, 1, st.DeadLettered)

	// The agent removes a directory after the item's result is sent: the
	// job may be seen done a moment before.
	// Spares made ahead for items to come (.spare.*) stay while it runs.
	require.Eventually(t, func() bool {
		left, err := os.ReadDir(filepath.Join(work, "jetfleet-items"))
		return err == nil && !slices.ContainsFunc(left, func(e os.DirEntry) bool { return !strings.HasPrefix(e.Name(), ".spare.") })
	}, 10*time.Second, 10*time.Millisecond, "every item's directory is removed when it ends")
	var kept []os.DirEntry
	require.Eventually(t, func() bool {
		var err error
		kept, err = os.ReadDir(filepath.Join(work, "jetfleet-failed"))
		return err == nil && len(kept) == 1
	}, 10*time.Second, 10*time.Millisecond, "the failed item's directory is kept")
	out, err := os.ReadFile(filepath.Join(work, "jetfleet-failed", kept[0].Name(), "out.json"))
	require.NoError(t, err)
	require.Equal(t, "bad\n", string(out))
	require.FileExists(t, filepath.Join(work, "jetfleet-failed", kept[0].Name(), "sub", "mark"))
}

// commit_required where the item's directory is a git checkout: a step
// that commits passes, one that does not fails with the reason; a step
// outside any checkout is not checked.
func TestCommitRequired(t *testing.T) {
	t.Parallel() // its own server; no rate, share or fault timing
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{Provision: coordinator.Provision(calmProvision)})
	startAgent(t, srv.URL(), testhooks.WithAgent(agent.Config{Name: "a", Concurrency: 4, WorkDir: t.TempDir()}, testhooks.Agent{Provision: calmProvision}), nil)
	cl := client(t, srv)
	const git = "git -c user.email=fleet@example.com -c user.name=fleet"
	id := submit(t, cl, `{"id": "commits", "items": [{"id": "a"}, {"id": "b"}],
		"agent_template": [
			{"shell": "true", "commit_required": true},
			{"shell": "git init -q . && `+git+` commit -q --allow-empty -m init"},
			{"shell": "if [ ${item_id} = a ]; then `+git+` commit -q --allow-empty -m work; fi", "commit_required": true, "retry_config": {"attempts": 1}}
		]}`)
	st := waitJob(t, cl, id, 60*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	require.EqualValues(t, 1, st.DeadLettered)
	entries := dlqEntries(t, cl, id)
	require.Len(t, entries, 1)
	require.Equal(t, "b", entries[0].Entry.ItemID)
	require.Contains(t, entries[0].Entry.Error, "commit_required: the step made no new commit")
}
