package natstest

import (
	"os"

	"golang.org/x/sys/unix"
)

// memStoreMinFree is the free space a memory file system needs before test
// stores go there: far above what the package's largest tests write (the
// scale cases' streams reach a few hundred MB), so a small /dev/shm (a
// container's 64 MB) is passed over.
const memStoreMinFree = 4 << 30

// memStoreRoot is /dev/shm when it is a tmpfs this process may write with
// memStoreMinFree free, else "".
func memStoreRoot() string {
	const root = "/dev/shm"
	var st unix.Statfs_t
	if unix.Statfs(root, &st) != nil || st.Type != unix.TMPFS_MAGIC {
		return ""
	}
	if uint64(st.Bavail)*uint64(st.Bsize) < memStoreMinFree {
		return ""
	}
	if unix.Access(root, unix.W_OK|unix.X_OK) != nil {
		return ""
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return ""
	}
	return root
}

// onMemoryFS reports whether dir is on a tmpfs.
func onMemoryFS(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Type == unix.TMPFS_MAGIC
}
