//go:build !linux

package natstest

// memStoreRoot is "": outside Linux, stores stay in t.TempDir().
func memStoreRoot() string { return "" }
