//go:build !linux

package natstest

// memStoreRoot is "": outside Linux, stores stay in t.TempDir().
func memStoreRoot() string { return "" }

// onMemoryFS is false: outside Linux, no file system is taken for memory.
func onMemoryFS(string) bool { return false }
