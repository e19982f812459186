package expand

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"iter"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Item is one work item of a job.
type Item struct {
	// Index is the item's 0-based position among the job's items.
	Index int64
	// ID is the item id: the value of the spec's id_field (a string, or a
	// number as written) or, when the item has none, the decimal Index.
	ID string
	// Group is the item's group under the spec's group_by; "" is the single
	// default group of a spec without group_by.
	Group string
	// Raw is the item's JSON. Items read from an input own their bytes;
	// inline items share them with the spec.
	Raw json.RawMessage
}

// iterator yields the raw items of one source, then io.EOF.
type iterator interface {
	next() (json.RawMessage, error)
	close() error
}

// Source yields the items of a job spec one at a time, with their ids and
// groups, and checks them: malformed JSON, empty or duplicate ids, and
// items group_by cannot place are errors. Build one with Open; read it with
// Next or All; Close it when stopping early.
//
// A Source is not safe for concurrent use.
type Source struct {
	ctx     context.Context
	spec    *messages.JobSpec
	open    Opener
	cfg     config
	it      iterator
	grouper *grouper
	idField string
	ids     *idSet // nil: no duplicate check
	index   int64
	err     error // sticky: io.EOF or the first error
}

// Open prepares to read the items of spec.
//
// Inline items (spec.Items) are read as they are. An input (spec.Input) is
// opened with open, which may be called again later (to confirm a
// duplicate id), and read through spec.JSONPath (DefaultJSONPath when
// empty), an RFC 9535 JSONPath query:
//
//   - A query that selects the elements of one array reached through
//     object fields — $[*], $.items[*], $.a.b[*], $['a']["b"][*], $.a.* —
//     is streamed: the input is read token by token up to the array, then
//     one element at a time, so memory holds one item whatever the size of
//     the input. The selected value must be an array, every named field must
//     exist and appear once, and the whole document is checked for syntax
//     up to its end.
//   - Any other query (filters such as $.items[?@.enabled==true], recursive
//     descent, slices, unions, indexes) is evaluated on the whole document,
//     decoded in memory (several times the input's size; inputs larger than
//     WithMaxDocumentBytes are refused). Its items are the selected nodes,
//     re-encoded as compact JSON (object keys sorted).
//   - A query that selects a single value ($, $.items) is refused: the
//     items of a job are a list; write $.items[*].
//
// Errors in the spec, in the json_path, in opening the input, and a path
// that is not in the input are returned by Open; errors in the items by
// Next. ctx bounds the reading as a whole: it must stay live while the
// Source is read.
func Open(ctx context.Context, spec *messages.JobSpec, open Opener, opts ...Option) (*Source, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return openSource(ctx, spec, open, cfg, true)
}

// openSource opens spec; check=false skips group and duplicate checks (to
// look an id up again).
func openSource(ctx context.Context, spec *messages.JobSpec, open Opener, cfg config, check bool) (*Source, error) {
	if spec == nil {
		return nil, errorf(ErrSpec, "no job spec")
	}
	s := &Source{ctx: ctx, spec: spec, open: open, cfg: cfg, idField: spec.IDField}
	if s.idField == "" {
		s.idField = messages.DefaultIDField
	}
	if check {
		g, err := newGrouper(spec.GroupBy)
		if err != nil {
			return nil, err
		}
		s.grouper = g
		if !cfg.skipDupCheck {
			s.ids = newIDSet()
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if spec.Input == "" {
		if spec.JSONPath != "" {
			return nil, errorf(ErrSpec, "json_path %s applies to input, and the spec has no input (inline items are used as they are)", spec.JSONPath)
		}
		s.it = &inlineIter{items: spec.Items}
		return s.selection()
	}
	if len(spec.Items) > 0 {
		return nil, errorf(ErrSpec, "items and input are mutually exclusive; the spec has both")
	}
	q, err := parseQuery(spec.JSONPath)
	if err != nil {
		return nil, err
	}
	if open == nil {
		return nil, errorf(ErrRef, "input %s: no opener", spec.Input)
	}
	rc, err := open(ctx, spec.Input)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", spec.Input, err)
	}
	if q.stream {
		reopen := func() (io.ReadCloser, error) { return open(ctx, spec.Input) }
		it, err := newFastStream(spec.Input, q, rc, reopen)
		if err != nil {
			rc.Close()
			return nil, err
		}
		s.it = it
	} else {
		it, err := newDocIter(ctx, spec.Input, q, rc, cfg.maxDocumentBytes, cfg.maxPathNodes)
		if err != nil {
			return nil, err
		}
		s.it = it
	}
	return s.selection()
}

// selection wraps the source's iterator in the spec's item selection.
func (s *Source) selection() (*Source, error) {
	it, err := newSelection(s.spec, s.it, s.cfg)
	if err != nil {
		s.it.close()
		return nil, err
	}
	s.it = it
	return s, nil
}

// Next returns the next item, or io.EOF after the last one. After an error
// (or io.EOF) every call returns the same error and the input is closed.
func (s *Source) Next() (Item, error) {
	if s.err != nil {
		return Item{}, s.err
	}
	if err := s.ctx.Err(); err != nil {
		return Item{}, s.fail(err)
	}
	raw, err := s.it.next()
	if err != nil {
		return Item{}, s.fail(err)
	}
	idx := s.index
	if idx >= s.cfg.maxItems {
		return Item{}, s.fail(errorf(ErrTooManyItems, "more than %d items; the limit is %d (the coordinator's --max-items)", s.cfg.maxItems, s.cfg.maxItems))
	}
	s.index++
	id := messages.ValidItemIdentity(raw, s.idField, idx) // every iterator yields valid JSON
	if id == "" {
		return Item{}, s.fail(&ItemError{Index: idx, Err: errorf(ErrItemID, "empty item id (field %q is an empty string or null)", s.idField)})
	}
	group, err := s.grouper.group(raw, id)
	if err != nil {
		return Item{}, s.fail(&ItemError{Index: idx, ID: id, Err: err})
	}
	if s.ids != nil && !s.ids.add(id) {
		first, err := s.firstIndexOf(id, idx)
		if err != nil {
			return Item{}, s.fail(fmt.Errorf("items[%d]: confirming duplicate item id %q: %w", idx, id, err))
		}
		if first >= 0 {
			return Item{}, s.fail(&ItemError{Index: idx, ID: id,
				Err: errorf(ErrDuplicateID, "duplicate item id %q (first at items[%d])", id, first)})
		}
		// A 64-bit hash collision between two different ids: go on.
	}
	return Item{Index: idx, ID: id, Group: group, Raw: raw}, nil
}

// All iterates over the items; an error is yielded once, last. The Source
// is closed when the loop ends, including by break.
func (s *Source) All() iter.Seq2[Item, error] {
	return func(yield func(Item, error) bool) {
		defer s.Close()
		for {
			it, err := s.Next()
			if err == io.EOF {
				return
			}
			if !yield(it, err) || err != nil {
				return
			}
		}
	}
}

// Close releases the input. It is safe to call more than once, and after
// Next returned an error or io.EOF.
func (s *Source) Close() error {
	if s.err == nil {
		s.err = errors.New("expand: source closed")
		return s.it.close()
	}
	return nil
}

func (s *Source) fail(err error) error {
	if s.err == nil {
		s.it.close()
	}
	s.err = err
	return err
}

// firstIndexOf reads the items again and returns the index of the first one
// before index `before` whose id is id, or -1 if none is (a hash collision).
func (s *Source) firstIndexOf(id string, before int64) (int64, error) {
	again, err := openSource(s.ctx, s.spec, s.open, s.cfg, false)
	if err != nil {
		return -1, err
	}
	defer again.Close()
	for again.index < before {
		it, err := again.Next()
		if err != nil {
			if err == io.EOF {
				err = errors.New("the input changed while it was read")
			}
			return -1, err
		}
		if it.ID == id {
			return it.Index, nil
		}
	}
	return -1, nil
}

// idSet remembers item ids by a 64-bit hash (maphash, seeded per Source),
// not by their text, so that memory does not depend on their length. Two
// different ids share a hash with probability about n²/2⁶⁵ (3·10⁻⁸ for a
// million items); a hit is confirmed by reading the items again and
// comparing the ids themselves, so a collision never fails a job.
//
// The hashes live in one open-addressing table (linear probing, at most
// 3/4 full, doubled when it would be fuller): 11 to 21 bytes an item, 32
// at the moment it doubles, against about 40 for a Go map[uint64]struct{}
// (docs/benchmarks.md).
type idSet struct {
	seed  maphash.Seed
	slots []uint64 // 0 = empty; a hash of 0 is stored as 1
	n     int
}

// idSetInitial is the first table size (a power of two).
const idSetInitial = 1 << 10

func newIDSet() *idSet {
	return &idSet{seed: maphash.MakeSeed(), slots: make([]uint64, idSetInitial)}
}

// add records id and reports whether its hash was new.
func (s *idSet) add(id string) bool {
	h := maphash.String(s.seed, id)
	if h == 0 {
		h = 1
	}
	if (s.n+1)*4 > len(s.slots)*3 {
		s.grow()
	}
	if !insert(s.slots, h) {
		return false
	}
	s.n++
	return true
}

func (s *idSet) grow() {
	bigger := make([]uint64, 2*len(s.slots))
	for _, h := range s.slots {
		if h != 0 {
			insert(bigger, h)
		}
	}
	s.slots = bigger
}

// insert puts h in the table unless it is there; it reports whether it
// was not. The table is a power of two long and never full.
func insert(slots []uint64, h uint64) bool {
	mask := uint64(len(slots) - 1)
	// The low bits of a maphash are as good as any: use them.
	for i := h & mask; ; i = (i + 1) & mask {
		switch slots[i] {
		case 0:
			slots[i] = h
			return true
		case h:
			return false
		}
	}
}

// inlineIter yields a spec's inline items.
type inlineIter struct {
	items []json.RawMessage
	i     int
}

func (it *inlineIter) next() (json.RawMessage, error) {
	if it.i >= len(it.items) {
		return nil, io.EOF
	}
	raw := it.items[it.i]
	if !json.Valid(raw) {
		return nil, &ItemError{Index: int64(it.i), Err: errorf(ErrMalformedJSON, "inline item is not valid JSON")}
	}
	it.i++
	return raw, nil
}

func (it *inlineIter) close() error { return nil }
