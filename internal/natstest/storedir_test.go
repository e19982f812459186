package natstest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// A server's store directory comes from JETFLEET_TEST_STORE_ROOT when set,
// is removed when the test ends, and a later run sweeps the old ones a
// killed test binary left behind, not the young ones another binary uses.
func TestStoreDirRoot(t *testing.T) {
	root := t.TempDir()
	old := filepath.Join(root, storeDirPrefix+"old")
	young := filepath.Join(root, storeDirPrefix+"young")
	other := filepath.Join(root, "not-ours")
	for _, d := range []string{old, young, other} {
		require.NoError(t, os.Mkdir(d, 0o700))
	}
	long := time.Now().Add(-2 * staleStoreAge)
	require.NoError(t, os.Chtimes(old, long, long))
	require.NoError(t, os.Chtimes(other, long, long))
	sweepStale(root)
	require.NoDirExists(t, old)
	require.DirExists(t, young)
	require.DirExists(t, other)

	t.Setenv(storeRootEnv, root)
	var dir string
	t.Run("server", func(t *testing.T) {
		srv := RunServer(t)
		dir = srv.StoreDir()
		require.Equal(t, root, filepath.Dir(dir))
		require.True(t, strings.HasPrefix(filepath.Base(dir), storeDirPrefix), dir)
		_, err := srv.JS().CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s"}})
		require.NoError(t, err)
		require.DirExists(t, filepath.Join(dir, "jetstream"))
	})
	require.NoDirExists(t, dir, "removed when its test ends")

	t.Setenv(storeRootEnv, "tempdir")
	t.Run("tempdir", func(t *testing.T) {
		dir := RunServer(t).StoreDir()
		require.NotEqual(t, root, filepath.Dir(dir))
		require.False(t, strings.HasPrefix(filepath.Base(dir), storeDirPrefix), dir)
	})
}

// MemoryStores follows the choice of store directory.
func TestMemoryStores(t *testing.T) {
	t.Setenv(storeRootEnv, "tempdir")
	require.False(t, MemoryStores())
	disk := t.TempDir()
	t.Setenv(storeRootEnv, disk)
	require.Equal(t, onMemoryFS(disk), MemoryStores())
	t.Setenv(storeRootEnv, "")
	require.Equal(t, memStoreRoot() != "", MemoryStores())
	if root := memStoreRoot(); root != "" {
		require.True(t, onMemoryFS(root))
		t.Setenv(storeRootEnv, root)
		require.True(t, MemoryStores())
	}
}
