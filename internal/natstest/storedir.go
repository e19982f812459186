package natstest

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// storeRootEnv names the environment variable that chooses where a test
// server keeps its JetStream files when no WithStoreDir is given: a
// directory, or "tempdir" for t.TempDir(). Unset, a memory file system is
// used when the machine has one with room (memStoreRoot), else t.TempDir().
const storeRootEnv = "JETFLEET_TEST_STORE_ROOT"

// storeDirPrefix starts the name of every store directory made outside
// t.TempDir(), so that those a killed test binary left behind can be found.
const storeDirPrefix = "jetfleet-test-"

// staleStoreAge is how old a leftover store directory must be before a
// later test run removes it: older than any test binary runs.
const staleStoreAge = 6 * time.Hour

// newStoreDir is a fresh, empty directory for a server's (or a cluster's)
// JetStream files, removed when t ends. The file store creates and deletes
// files at a high rate (a stream's blocks, its index, a consumer's state,
// each written through a temporary file); on a disk file system such as
// ext4 that cost internal/e2e a quarter of its CPU time (its system time
// fell from 60 to 25 CPU-seconds on tmpfs), the largest part in the
// kernel's inode allocation. On a memory file system it costs little, and nothing a test checks depends on the disk: the servers'
// store limits are configured, not read off the file system.
func newStoreDir(t testing.TB) string {
	t.Helper()
	root := os.Getenv(storeRootEnv)
	switch root {
	case "tempdir":
		return t.TempDir()
	case "":
		if root = memStoreRoot(); root == "" {
			return t.TempDir()
		}
	}
	sweepOnce.Do(func() { sweepStale(root) })
	dir, err := os.MkdirTemp(root, storeDirPrefix)
	if err != nil {
		t.Fatalf("natstest: a store directory under %s (%s): %v", root, storeRootEnv, err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("natstest: removing the store directory: %v", err)
		}
	})
	return dir
}

// MemoryStores reports whether the servers this package starts keep their
// files on a memory file system (newStoreDir): writing a store full, or
// many stores at once, then costs no disk time, so tests that do may run
// beside others.
func MemoryStores() bool {
	switch root := os.Getenv(storeRootEnv); root {
	case "":
		return memStoreRoot() != ""
	case "tempdir":
		return false
	default:
		return onMemoryFS(root)
	}
}

var sweepOnce sync.Once

// sweepStale removes the store directories under root that a test binary
// killed before its cleanup left behind.
func sweepStale(root string) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), storeDirPrefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleStoreAge {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
}
