package itemrun

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
//
// Making and removing a directory was a shell step's dearest
// bookkeeping: every slot doing both in one parent directory, beside many
// processes starting, cost an agent more CPU than the rest of the item
// (docs/benchmarks.md, "An item's directory without a mkdir and an
// rmdir"); a rename costs next to nothing. So one goroutine per agent
// makes a few fresh, empty spare directories ahead
// (<WorkDir>/jetfleet-items/.spare.*), make renames one to the item's
// name, and the goroutine removes finished items' directories after the
// slot has gone on. Where a subreaper sees to it that no process of a
// step outlives the step, a successful item's directory that its steps
// left empty, private and plain (the mode and owner of a fresh one, no
// extended attributes or ACLs, one block) becomes a spare rather than
// being removed: the next item cannot tell it from a fresh one. The
// worker checks it after the slot has gone on (handBack), and it keeps the
// finished item's name as a spare until make renames it to the next
// item's: no item runs in it unchecked, and it is renamed once per item.
// (When the worker is behind or stopped, the slot checks it and renames
// it to a .spare.r* name, as before.) The worker renames the spares left
// under an item's name to .spare.r* names at most tidySpares later.

const (
	itemDirsName   = "jetfleet-items"
	failedDirsName = "jetfleet-failed"
	// spareDirPrefix names the spares; a leading dot keeps them out of a
	// plain ls.
	spareDirPrefix = ".spare."
	// spareDirs is how many spares the worker keeps made ahead, or,
	// where items' directories are reused, spareLow; goneDirs is how many
	// finished directories may wait for it, beyond which a slot removes
	// its item's directory itself.
	spareDirs = 16
	spareLow  = 2
	goneDirs  = 256
)

// itemDirs makes, removes and keeps item directories. It is safe for
// concurrent use; close stops its worker.
type itemDirs struct {
	base, failed string
	keep         int
	keepBytes    int64
	mu           sync.Mutex // serialises keeping and pruning
	last         time.Time  // the last kept directory's time, under mu
	once         sync.Once  // makes base and starts the worker
	err          error

	// spares are directories made ahead by the worker; gone are finished
	// ones it removes. closing guards working and closed: a directory is
	// only sent to gone while the worker runs and drains it.
	spares  chan string
	gone    chan string
	back    chan string   // finished items' directories to reuse, checked by the worker
	want    chan struct{} // a spare was taken
	closing sync.RWMutex
	working bool
	closed  bool
	noSpare atomic.Bool // renames here cannot refuse an existing name
	// tidyAfter is how long a spare waits under a finished item's name
	// before the worker renames it to a .spare.r* name (tests shorten it).
	tidyAfter time.Duration
	// recycle: emptied directories may become spares (set by Run when
	// the process is a subreaper); fresh is the mode and owner of a
	// directory made here, 0 until one is.
	recycle atomic.Bool
	fresh   atomic.Pointer[dirOwner]
	quit    chan struct{}
	worker  sync.WaitGroup
}

func newItemDirs(workDir string, keep int, keepBytes int64) *itemDirs {
	if workDir == "" {
		workDir, _ = os.Getwd()
	}
	return &itemDirs{base: filepath.Join(workDir, itemDirsName), failed: filepath.Join(workDir, failedDirsName), keep: keep, keepBytes: keepBytes,
		spares: make(chan string, spareDirs), gone: make(chan string, goneDirs), back: make(chan string, goneDirs), tidyAfter: tidySpares, want: make(chan struct{}, 1), quit: make(chan struct{})}
}

// make creates a fresh directory for an item of job: a spare renamed to
// the item's name, or, when there is none, one made here.
func (d *itemDirs) make(job, itemID string) (string, error) {
	d.once.Do(d.start)
	if d.err != nil {
		return "", d.err
	}
	prefix := dirPrefix(job, itemID)
	select {
	case d.want <- struct{}{}:
	default:
	}
	select {
	case spare := <-d.spares:
		// Spares are dropped where renames cannot refuse an existing name.
		for range 4 {
			dir := filepath.Join(d.base, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
			err := renameNoReplace(spare, dir)
			if err == nil {
				return dir, nil
			}
			if !errors.Is(err, fs.ErrExist) {
				if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
					d.noSpare.Store(true) // this file system has no RENAME_NOREPLACE
				}
				break
			}
		}
		d.remove(spare)
	default:
	}
	return d.mkdirTemp(prefix)
}

// mkdirTemp makes a directory under base, and notes a fresh one's mode
// and owner.
func (d *itemDirs) mkdirTemp(prefix string) (string, error) {
	dir, err := os.MkdirTemp(d.base, prefix)
	if err == nil && d.fresh.Load() == nil {
		if o, ok := ownerOf(dir); ok {
			d.fresh.Store(&o)
		}
	}
	return dir, err
}

// reuse makes dir a spare if it can serve another item as a fresh one
// would, and says whether it did.
func (d *itemDirs) reuse(dir string) bool {
	fresh := d.fresh.Load()
	if !d.recycle.Load() || d.noSpare.Load() || fresh == nil || !emptyLike(dir, *fresh) {
		return false
	}
	d.closing.RLock()
	defer d.closing.RUnlock()
	if !d.working || d.closed {
		return false
	}
	spare := filepath.Join(d.base, spareDirPrefix+"r"+strconv.FormatUint(uint64(rand.Uint32()), 10))
	if renameNoReplace(dir, spare) != nil {
		return false
	}
	select {
	case d.spares <- spare:
	default: // as many spares as items: one is too many
		select {
		case d.gone <- spare:
		default:
			_ = os.Remove(spare)
		}
	}
	return true
}

// handBack gives a successful item's directory to the worker, which
// makes it a spare if it can serve another item as a fresh one would
// (takeBack) and removes it otherwise; false when it is not to be reused
// (done removes it). The check is done off the slot, which goes on to its
// next item meanwhile: with the rename back into a spare it was about a
// seventh of an agent's CPU on shell steps, all of it between one item's
// end and the next one's start. While the worker is behind or stopped,
// the slot checks the directory itself (reuse).
func (d *itemDirs) handBack(dir string) bool {
	if !d.recycle.Load() || d.noSpare.Load() || d.fresh.Load() == nil {
		return false
	}
	d.closing.RLock()
	if d.working && !d.closed {
		select {
		case d.back <- dir:
			d.closing.RUnlock()
			return true
		default:
		}
	}
	d.closing.RUnlock()
	return d.reuse(dir)
}

// takeBack makes a directory handed back a spare if it can serve another
// item as a fresh one would, and removes it otherwise; it reports whether
// it made a spare. A spare keeps the finished item's name until make
// renames it to the next item's: one rename per item, not two. Renames in
// one parent directory are not free when 16 slots and the worker make
// them at once (they take the parent's lock in turn).
func (d *itemDirs) takeBack(dir string) bool {
	fresh := d.fresh.Load()
	if fresh == nil || !emptyLike(dir, *fresh) {
		_ = os.RemoveAll(dir)
		return false
	}
	select {
	case d.spares <- dir:
		return true
	default: // as many spares as items: one is too many
		_ = os.RemoveAll(dir)
		return false
	}
}

// tidySpares is how long, at most, a spare keeps a finished item's name
// (tidy): at most spareDirs renames this often, next to one per item.
const tidySpares = time.Second

// tidy renames the spares that have a finished item's name to .spare.r*
// names: a directory under an item's name is an item's, running or
// failed, to whoever looks, and a .spare.* one left by an agent that did
// not stop is removed at the next start.
func (d *itemDirs) tidy() {
	for range len(d.spares) {
		var dir string
		select {
		case dir = <-d.spares:
		default:
			return // taken meanwhile
		}
		if !strings.HasPrefix(filepath.Base(dir), spareDirPrefix) {
			spare := filepath.Join(d.base, spareDirPrefix+"r"+strconv.FormatUint(uint64(rand.Uint32()), 10))
			if renameNoReplace(dir, spare) != nil {
				_ = os.RemoveAll(dir)
				continue
			}
			dir = spare
		}
		select {
		case d.spares <- dir:
		default:
			_ = os.Remove(dir)
		}
	}
}

// start makes base and, where renames can refuse an existing name,
// starts the worker. Spares an agent that did not stop left there are
// removed first (only empty ones: a spare holds nothing).
func (d *itemDirs) start() {
	if d.err = os.MkdirAll(d.base, 0o700); d.err != nil || !renameNoReplaceWorks {
		return
	}
	if entries, err := os.ReadDir(d.base); err == nil {
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), spareDirPrefix) {
				_ = syscall.Rmdir(filepath.Join(d.base, e.Name()))
			}
		}
	}
	d.closing.Lock()
	defer d.closing.Unlock()
	if !d.closed {
		d.working = true
		d.worker.Add(1)
		go d.work()
	}
}

// work keeps spares made ahead and removes finished directories until
// close; then it removes what waits and its spares.
func (d *itemDirs) work() {
	defer d.worker.Done()
	var tidy <-chan time.Time // set while a spare has an item's name
	takeBack := func(dir string) {
		if d.takeBack(dir) && tidy == nil {
			tidy = time.After(d.tidyAfter)
		}
	}
	for {
		// Directories handed back first: each may spare a mkdir below.
		for taken := true; taken; {
			select {
			case dir := <-d.back:
				takeBack(dir)
			default:
				taken = false
			}
		}
		target := spareDirs
		if d.recycle.Load() {
			target = spareLow
		}
		for !d.noSpare.Load() && len(d.spares) < target {
			// A failure (a full disk) is tried again after the next take
			// or removal: make makes its own meanwhile.
			spare, err := d.mkdirTemp(spareDirPrefix)
			if err != nil {
				break
			}
			select {
			case d.spares <- spare:
				continue
			default: // filled by reuse meanwhile
				_ = os.Remove(spare)
			}
			break
		}
		select {
		case <-d.want:
		case dir := <-d.back:
			takeBack(dir)
		case <-tidy:
			tidy = nil
			d.tidy()
		case dir := <-d.gone:
			_ = os.RemoveAll(dir)
		case <-d.quit:
			for {
				select {
				case dir := <-d.back:
					_ = os.RemoveAll(dir)
				case dir := <-d.gone:
					_ = os.RemoveAll(dir)
				case dir := <-d.spares:
					_ = os.Remove(dir)
				default:
					return
				}
			}
		}
	}
}

// remove removes dir, by the worker unless it is behind or stopped.
func (d *itemDirs) remove(dir string) {
	d.closing.RLock()
	if d.working && !d.closed {
		select {
		case d.gone <- dir:
			d.closing.RUnlock()
			return
		default:
		}
	}
	d.closing.RUnlock()
	_ = os.RemoveAll(dir)
}

// close stops the worker once it has removed the directories sent to it
// and its spares. The directories of items that end later are removed by
// their slots.
func (d *itemDirs) close() {
	d.closing.Lock()
	if d.closed {
		d.closing.Unlock()
		return
	}
	d.closed = true
	d.closing.Unlock()
	close(d.quit)
	d.worker.Wait()
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
	if dir == "" || !failed && d.handBack(dir) {
		return
	}
	if !failed || d.keep <= 0 || dirSize(dir, d.keepBytes) > d.keepBytes {
		d.remove(dir)
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
