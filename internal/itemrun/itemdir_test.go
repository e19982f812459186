package itemrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestItemDirsKeepBounds(t *testing.T) {
	work := t.TempDir()
	d := newItemDirs(work, 2, 100)
	var made []string
	for i := range 4 {
		dir, err := d.make("job/1", "item "+strings.Repeat("x", 100)+string(rune('a'+i)))
		require.NoError(t, err)
		require.Equal(t, filepath.Join(work, itemDirsName), filepath.Dir(dir))
		require.LessOrEqual(t, len(filepath.Base(dir)), 80, "a bounded, path-safe name")
		require.NotContains(t, filepath.Base(dir), "/")
		made = append(made, dir)
	}
	d.done(made[0], false)
	require.NoDirExists(t, made[0], "a delivery that did not fail leaves nothing")

	require.NoError(t, os.WriteFile(filepath.Join(made[1], "big"), make([]byte, 101), 0o600))
	d.done(made[1], true)
	require.NoDirExists(t, made[1], "above KeepFailedBytes: removed")

	d.done(made[2], true)
	d.done(made[3], true)
	kept, err := os.ReadDir(filepath.Join(work, failedDirsName))
	require.NoError(t, err)
	require.Len(t, kept, 2)

	another, err := d.make("job", "c")
	require.NoError(t, err)
	d.done(another, true)
	kept, err = os.ReadDir(filepath.Join(work, failedDirsName))
	require.NoError(t, err)
	require.Len(t, kept, 2, "KeepFailed: the oldest goes")
	var names []string
	for _, k := range kept {
		names = append(names, k.Name())
	}
	require.Contains(t, names, filepath.Base(another))

	none := newItemDirs(t.TempDir(), -1, 100)
	dir, err := none.make("j", "i")
	require.NoError(t, err)
	none.done(dir, true)
	require.NoDirExists(t, dir, "KeepFailed < 0 keeps none")
}
