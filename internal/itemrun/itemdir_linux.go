package itemrun

import (
	"errors"

	"golang.org/x/sys/unix"
)

// renameNoReplaceWorks: Linux refuses to rename over an existing name
// when asked to (renameat2 RENAME_NOREPLACE), so spares can be used.
const renameNoReplaceWorks = true

// renameNoReplace renames from to to unless to exists (fs.ErrExist).
func renameNoReplace(from, to string) error {
	return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
}

// dirOwner is a directory's mode (type and permission bits) and owner.
type dirOwner struct {
	mode     uint32
	uid, gid uint32
}

// ownerOf is dir's mode and owner.
func ownerOf(dir string) (dirOwner, bool) {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil {
		return dirOwner{}, false
	}
	return dirOwner{st.Mode, st.Uid, st.Gid}, true
}

// dirBlock bounds the size of a directory worth reusing: a file system
// keeps the blocks a directory once grew to.
const dirBlock = 4096

// emptyLike reports whether dir is a directory (not a link to one) with
// want's mode and owner, no extended attributes (so no ACL), at most
// one block, and no entries.
func emptyLike(dir string, want dirOwner) bool {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || (dirOwner{st.Mode, st.Uid, st.Gid}) != want || st.Size > dirBlock {
		return false
	}
	if n, err := unix.Flistxattr(fd, nil); n != 0 || err != nil && !errors.Is(err, unix.ENOTSUP) {
		return false
	}
	var buf [1024]byte
	for {
		n, err := unix.Getdents(fd, buf[:])
		if err != nil {
			return false
		}
		if n <= 0 {
			return true
		}
		if _, count, _ := unix.ParseDirent(buf[:n], 1, nil); count > 0 {
			return false // not . or ..
		}
	}
}
