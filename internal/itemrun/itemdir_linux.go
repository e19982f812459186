package itemrun

import "golang.org/x/sys/unix"

// renameNoReplaceWorks: Linux refuses to rename over an existing name
// when asked to (renameat2 RENAME_NOREPLACE), so spares can be used.
const renameNoReplaceWorks = true

// renameNoReplace renames from to to unless to exists (fs.ErrExist).
func renameNoReplace(from, to string) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
}
