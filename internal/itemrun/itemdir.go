package itemrun

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Each delivery of a map item that runs a shell or claude step runs in a
// directory of its own, made when its first such step starts, under
// <WorkDir>/jetfleet-items: its steps' working directory ($PWD), named to
// them as ITEM_WORKDIR. Two items on one agent never share files. The
// directory is removed when the delivery ends; when it ends in a failure
// (a retry, an item retry, a give-up) it moves to
// <WorkDir>/jetfleet-failed for inspection, unless it holds more than
// Config.KeepFailedBytes, and only the Config.KeepFailed most recent are
// kept. A retry runs in a fresh directory, as it may run on another
// agent. Jobs of handler steps only make no directory.

const (
	itemDirsName   = "jetfleet-items"
	failedDirsName = "jetfleet-failed"
)

// itemDirs makes, removes and keeps item directories. It is safe for
// concurrent use.
type itemDirs struct {
	base, failed string
	keep         int
	keepBytes    int64
	mu           sync.Mutex // serialises keeping and pruning
	last         time.Time  // the last kept directory's time, under mu
	once         sync.Once
	err          error
}

func newItemDirs(workDir string, keep int, keepBytes int64) *itemDirs {
	if workDir == "" {
		workDir, _ = os.Getwd()
	}
	return &itemDirs{base: filepath.Join(workDir, itemDirsName), failed: filepath.Join(workDir, failedDirsName), keep: keep, keepBytes: keepBytes}
}

// make creates a fresh directory for an item of job.
func (d *itemDirs) make(job, itemID string) (string, error) {
	d.once.Do(func() { d.err = os.MkdirAll(d.base, 0o700) })
	if d.err != nil {
		return "", d.err
	}
	return os.MkdirTemp(d.base, dirPrefix(job, itemID))
}

// dirPrefix is a readable, bounded, path-safe name for an item: its job
// and id with anything but letters, digits, '-' and '_' dropped, cut short,
// and a hash of both so that distinct items never look alike.
func dirPrefix(job, itemID string) string {
	clean := func(s string, n int) string {
		s = strings.Map(func(r rune) rune {
			if r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, s)
		return s[:min(len(s), n)]
	}
	h := sha256.Sum256([]byte(job + "\x00" + itemID))
	return clean(job, 24) + "." + clean(itemID, 32) + "." + hex.EncodeToString(h[:4]) + "."
}

// done removes dir, or keeps it when failed (within the bounds).
func (d *itemDirs) done(dir string, failed bool) {
	if dir == "" {
		return
	}
	if !failed || d.keep <= 0 || dirSize(dir, d.keepBytes) > d.keepBytes {
		_ = os.RemoveAll(dir)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.MkdirAll(d.failed, 0o700); err != nil {
		_ = os.RemoveAll(dir)
		return
	}
	kept := filepath.Join(d.failed, filepath.Base(dir))
	if err := os.Rename(dir, kept); err != nil {
		_ = os.RemoveAll(dir)
		return
	}
	// Strictly increasing times order the kept directories even on a
	// coarse clock.
	now := time.Now()
	if !now.After(d.last) {
		now = d.last.Add(time.Millisecond)
	}
	d.last = now
	_ = os.Chtimes(kept, now, now)
	d.prune()
}

// prune removes the oldest kept directories beyond d.keep.
func (d *itemDirs) prune() {
	entries, err := os.ReadDir(d.failed)
	if err != nil || len(entries) <= d.keep {
		return
	}
	type kept struct {
		path string
		mod  time.Time
	}
	var all []kept
	for _, e := range entries {
		if info, err := e.Info(); err == nil {
			all = append(all, kept{filepath.Join(d.failed, e.Name()), info.ModTime()})
		}
	}
	slices.SortFunc(all, func(a, b kept) int { return a.mod.Compare(b.mod) })
	for _, k := range all[:max(0, len(all)-d.keep)] {
		_ = os.RemoveAll(k.path)
	}
}

// dirSize is the size of the files under dir, counted up to just past
// limit.
func dirSize(dir string, limit int64) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		if n > limit {
			return filepath.SkipAll
		}
		return nil
	})
	return n
}
