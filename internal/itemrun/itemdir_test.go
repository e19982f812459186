package itemrun

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestItemDirsKeepBounds(t *testing.T) {
	work := t.TempDir()
	d := newItemDirs(work, 2, 100)
	defer d.close()
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
	requireGone(t, made[0], "a delivery that did not fail leaves nothing")

	require.NoError(t, os.WriteFile(filepath.Join(made[1], "big"), make([]byte, 101), 0o600))
	d.done(made[1], true)
	requireGone(t, made[1], "above KeepFailedBytes: removed")

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
	defer none.close()
	dir, err := none.make("j", "i")
	require.NoError(t, err)
	none.done(dir, true)
	requireGone(t, dir, "KeepFailed < 0 keeps none")
}

// requireGone waits for the worker to remove dir.
func requireGone(t *testing.T, dir, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := os.Lstat(dir)
		return os.IsNotExist(err)
	}, 10*time.Second, time.Millisecond, msg)
}

// spareNames lists the spares under work's item directories.
func spareNames(t *testing.T, work string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(work, itemDirsName))
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), spareDirPrefix) {
			names = append(names, e.Name())
		}
	}
	return names
}

// The worker makes spares ahead; an item's directory is one of them
// renamed, and is as fresh as one made for it: empty and private,
// whatever the items before left in theirs. Closing
// removes the spares and the directories waiting for removal; items that
// end later have theirs removed at once. Empty spares an agent left
// behind are removed when the next starts.
func TestItemDirsSpares(t *testing.T) {
	work := t.TempDir()
	base := filepath.Join(work, itemDirsName)
	require.NoError(t, os.MkdirAll(filepath.Join(base, spareDirPrefix+"left"), 0o700))
	require.NoError(t, os.MkdirAll(filepath.Join(base, spareDirPrefix+"full"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(base, spareDirPrefix+"full", "f"), nil, 0o600))

	d := newItemDirs(work, 2, 100)
	first, err := d.make("job", "first")
	require.NoError(t, err)
	require.NoDirExists(t, filepath.Join(base, spareDirPrefix+"left"), "an empty spare of an agent gone")
	require.DirExists(t, filepath.Join(base, spareDirPrefix+"full"), "not a spare of ours: never removed")
	require.NoError(t, os.RemoveAll(filepath.Join(base, spareDirPrefix+"full")))
	require.Eventually(t, func() bool { return len(spareNames(t, work)) == spareDirs }, 10*time.Second, time.Millisecond,
		"the worker keeps spares made ahead")

	for i := range 3 * spareDirs {
		dir, err := d.make("job", "item-"+strconv.Itoa(i))
		require.NoError(t, err)
		require.Equal(t, base, filepath.Dir(dir))
		require.True(t, strings.HasPrefix(filepath.Base(dir), dirPrefix("job", "item-"+strconv.Itoa(i))), "named after the item: %s", dir)
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		require.Equal(t, os.ModeDir|0o700, fi.Mode(), "private")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "fresh")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "left"), []byte("x"), 0o600))
		d.done(dir, false)
		requireGone(t, dir, "removed when the item ends")
	}

	pending, err := d.make("job", "pending")
	require.NoError(t, err)
	d.done(pending, false)
	d.close()
	require.NoDirExists(t, pending, "removed before close returns")
	require.Empty(t, spareNames(t, work), "close removes the spares")
	d.close() // idempotent

	late, err := d.make("job", "late")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(late, "f"), nil, 0o600))
	d.done(late, false)
	require.NoDirExists(t, late, "after close, removed by the slot")
	d.done(first, false)
	require.NoDirExists(t, first)
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// Where no process of a step outlives it, a successful item's directory
// that its steps left as they found it (empty, the mode and owner of a
// fresh one, no extended attributes) becomes a spare for another item
// rather than being removed; anything else is removed. A failed item's
// is never reused.
func TestItemDirsRecycle(t *testing.T) {
	work := t.TempDir()
	d := newItemDirs(work, 2, 100)
	d.tidyAfter = time.Hour // spares keep their items' names (TestItemDirsTidy)
	defer d.close()
	recycled := func() int {
		n := 0
		for _, name := range spareNames(t, work) {
			if strings.HasPrefix(name, spareDirPrefix+"r") {
				n++
			}
		}
		return n
	}
	plain, err := d.make("job", "plain")
	require.NoError(t, err)
	d.done(plain, false)
	requireGone(t, plain, "not recycled unless Run says so")
	require.Zero(t, recycled())

	d.recycle.Store(true)
	xattr, err := d.make("job", "xattr")
	require.NoError(t, err)
	if err := syscall.Setxattr(xattr, "user.note", []byte("x"), 0); err == nil {
		d.done(xattr, false)
		requireGone(t, xattr, "extended attributes: removed")
		require.Zero(t, recycled())
	}
	changes := map[string]func(dir string) error{
		"a file":     func(dir string) error { return os.WriteFile(filepath.Join(dir, "f"), nil, 0o600) },
		"a subdir":   func(dir string) error { return os.Mkdir(filepath.Join(dir, "sub"), 0o700) },
		"its mode":   func(dir string) error { return os.Chmod(dir, 0o755) },
		"a symlink":  func(dir string) error { return errors.Join(os.Remove(dir), os.Symlink(t.TempDir(), dir)) },
		"a big list": func(dir string) error { return growAndEmpty(dir) },
	}
	if !keepsGrownDirs(t, work) {
		// A file system that shrinks an emptied directory (tmpfs) leaves
		// nothing to tell a big list by, and nothing slow to reuse.
		delete(changes, "a big list")
	}
	for name, change := range changes {
		dir, err := d.make("job", name)
		require.NoError(t, err)
		require.NoError(t, change(dir), name)
		d.done(dir, false)
		requireGone(t, dir, name+": removed")
		require.Zero(t, recycled(), name)
	}
	failed, err := d.make("job", "failed")
	require.NoError(t, err)
	d.done(failed, true)
	require.NoDirExists(t, failed)
	require.Zero(t, recycled(), "a failed item's directory is kept, not reused")

	touched, err := d.make("job", "touched")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(touched, "f"), nil, 0o600))
	require.NoError(t, os.Remove(filepath.Join(touched, "f")))
	spares := len(d.spares)
	require.Greater(t, spares, spareLow, "the worker makes none meanwhile")
	d.done(touched, false)
	require.Eventually(t, func() bool { return len(d.spares) == spares+1 }, 10*time.Second, time.Millisecond,
		"emptied by its steps: a spare")
	require.DirExists(t, touched, "a spare under its item's name")

	for i := range 2*spareDirs + 2 {
		dir, err := d.make("job", "next-"+strconv.Itoa(i))
		require.NoError(t, err)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries)
		fi, err := os.Stat(dir)
		require.NoError(t, err)
		require.Equal(t, os.ModeDir|0o700, fi.Mode())
	}
	require.NoDirExists(t, touched, "the spare served an item")
	require.Zero(t, recycled(), "the worker renames no spare")
}

// growAndEmpty makes dir grow past one block, then empties it.
// keepsGrownDirs reports whether the file system under work keeps the
// blocks of a directory that grew and was emptied, as ext4 does.
func keepsGrownDirs(t *testing.T, work string) bool {
	t.Helper()
	dir, err := os.MkdirTemp(work, "grow")
	require.NoError(t, err)
	defer os.RemoveAll(dir)
	require.NoError(t, growAndEmpty(dir))
	info, err := os.Stat(dir)
	require.NoError(t, err)
	return info.Size() > dirBlock
}

func growAndEmpty(dir string) error {
	for i := range 300 {
		if err := os.WriteFile(filepath.Join(dir, strings.Repeat("n", 40)+strconv.Itoa(i)), nil, 0o600); err != nil {
			return err
		}
	}
	for i := range 300 {
		if err := os.Remove(filepath.Join(dir, strings.Repeat("n", 40)+strconv.Itoa(i))); err != nil {
			return err
		}
	}
	return nil
}

// A successful item's directory is handed back to the worker, which
// checks it and makes it a spare after the slot has gone on: until then
// it keeps the item's name, and a directory handed back and not yet
// checked when the agent stops is removed by close. Once the worker has
// stopped, the slot removes its item's directory itself.
func TestItemDirsHandBack(t *testing.T) {
	work := t.TempDir()
	d := newItemDirs(work, 2, 100)
	d.recycle.Store(true)
	var dirs []string
	for i := range 2 * spareDirs {
		dir, err := d.make("job", "item-"+strconv.Itoa(i))
		require.NoError(t, err)
		dirs = append(dirs, dir)
	}
	for _, dir := range dirs {
		d.done(dir, false)
	}
	d.close()
	for _, dir := range dirs {
		require.NoDirExists(t, dir, "removed or made a spare before close returns")
	}
	require.Empty(t, spareNames(t, work), "close removes the spares")

	late, err := d.make("job", "late")
	require.NoError(t, err)
	d.done(late, false)
	require.NoDirExists(t, late, "after close, removed by the slot")
	entries, err := os.ReadDir(filepath.Join(work, itemDirsName))
	require.NoError(t, err)
	require.Empty(t, entries)
}

// A spare left under a finished item's name is renamed to a .spare.r*
// name after a while: only items' own directories have items' names, and
// an agent that did not stop leaves only .spare.* ones behind.
func TestItemDirsTidy(t *testing.T) {
	work := t.TempDir()
	d := newItemDirs(work, 2, 100)
	d.recycle.Store(true)
	d.tidyAfter = time.Millisecond
	defer d.close()
	dir, err := d.make("job", "tidy")
	require.NoError(t, err)
	d.done(dir, false)
	require.Eventually(t, func() bool {
		for _, name := range spareNames(t, work) {
			if strings.HasPrefix(name, spareDirPrefix+"r") {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "renamed to a spare's name")
	require.NoDirExists(t, dir)
	entries, err := os.ReadDir(filepath.Join(work, itemDirsName))
	require.NoError(t, err)
	for _, e := range entries {
		require.True(t, strings.HasPrefix(e.Name(), spareDirPrefix), "only spares: %s", e.Name())
	}
}
