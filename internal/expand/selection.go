package expand

import (
	"bytes"
	"encoding/json"
	"hash/maphash"
	"io"
	"slices"

	"github.com/jetfleet/jetfleet/internal/expr"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// DefaultMaxSortBytes bounds what sort_by holds in memory. See
// WithMaxSortBytes.
const DefaultMaxSortBytes = 64 << 20

// sortedItemOverhead is what each item held for sort_by costs besides its
// JSON: its slice header, its place in the order and its decoded keys'
// headers.
const sortedItemOverhead = 64

// selectIter applies Prodigy's item selection to the items of another
// iterator, in Prodigy's order: filter, sort_by, distinct, offset,
// max_items. Without sort_by it streams: memory holds one item, plus 16
// bytes a distinct value for distinct. With sort_by it reads every item
// the filter keeps before yielding the first, within maxSortBytes.
type selectIter struct {
	in       iterator
	filter   *expr.Expr
	sortBy   []expr.SortKey
	distinct expr.Path // nil: none
	offset   int64
	limit    int64 // -1: none

	seen         map[[2]uint64]struct{}
	seeds        [2]maphash.Seed
	skipped, out int64

	maxSortBytes int64
	sorted       []sortedItem // with sortBy, once read
	read         bool
	pos          int
}

type sortedItem struct {
	raw  json.RawMessage
	keys []any // the sort keys' values; missing is missingKey
	ok   []bool
}

// newSelection wraps it when spec selects items; it returns it unchanged
// when spec does not, so a job without selection pays nothing.
func newSelection(spec *messages.JobSpec, it iterator, cfg config) (iterator, error) {
	if spec.Filter == "" && spec.SortBy == "" && spec.Distinct == "" && spec.Offset == 0 && spec.MaxItems == nil {
		return it, nil
	}
	s := &selectIter{in: it, offset: int64(spec.Offset), limit: -1, maxSortBytes: cfg.maxSortBytes}
	var err error
	if spec.Filter != "" {
		if s.filter, err = expr.Parse(spec.Filter); err != nil {
			return nil, errorf(ErrSelection, "filter: %v", err)
		}
	}
	if spec.SortBy != "" {
		if s.sortBy, err = expr.ParseSortBy(spec.SortBy); err != nil {
			return nil, errorf(ErrSelection, "sort_by: %v", err)
		}
	}
	if spec.Distinct != "" {
		if s.distinct, err = expr.ParsePath(spec.Distinct); err != nil {
			return nil, errorf(ErrSelection, "distinct: %v", err)
		}
		s.seen = map[[2]uint64]struct{}{}
		s.seeds = [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}
	}
	if spec.Offset < 0 {
		return nil, errorf(ErrSelection, "offset %d: must be >= 0", spec.Offset)
	}
	if m := spec.MaxItems; m != nil {
		if *m < 0 {
			return nil, errorf(ErrSelection, "max_items %d: must be >= 0", *m)
		}
		s.limit = int64(*m)
	}
	return s, nil
}

func decodeItem(raw json.RawMessage) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// nextSelected returns the next item the filter keeps, in sorted order
// with sort_by, with its decoded value when one was needed.
func (s *selectIter) nextSelected() (json.RawMessage, any, error) {
	if s.sortBy != nil {
		if !s.read {
			if err := s.readAll(); err != nil {
				return nil, nil, err
			}
		}
		if s.pos >= len(s.sorted) {
			return nil, nil, io.EOF
		}
		it := s.sorted[s.pos]
		s.sorted[s.pos] = sortedItem{} // let it go
		s.pos++
		if s.distinct == nil {
			return it.raw, nil, nil
		}
		v, err := decodeItem(it.raw)
		return it.raw, v, err
	}
	for {
		raw, err := s.in.next()
		if err != nil {
			return nil, nil, err
		}
		if s.filter == nil && s.distinct == nil {
			return raw, nil, nil
		}
		v, err := decodeItem(raw)
		if err != nil {
			return nil, nil, err
		}
		if s.filter == nil || s.filter.Eval(expr.JSON(v)) {
			return raw, v, nil
		}
	}
}

// readAll reads and filters every item and sorts them (stably: equal
// items keep their input order, as Prodigy's sort does).
func (s *selectIter) readAll() error {
	s.read = true
	var size int64
	for {
		raw, err := s.in.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		v, err := decodeItem(raw)
		if err != nil {
			return err
		}
		look := expr.JSON(v)
		if s.filter != nil && !s.filter.Eval(look) {
			continue
		}
		it := sortedItem{raw: raw, keys: make([]any, len(s.sortBy)), ok: make([]bool, len(s.sortBy))}
		for i, k := range s.sortBy {
			it.keys[i], it.ok[i] = look(k.Path)
			if b, isContainer := keySize(it.keys[i]); isContainer {
				// Arrays and objects sort by their length: keep only that.
				it.keys[i] = b
			}
		}
		size += int64(len(raw)) + sortedItemOverhead + int64(len(s.sortBy))*32
		if size > s.maxSortBytes {
			return errorf(ErrSortTooLarge, "sort_by holds the selected items in memory to sort them, and they take more than %d bytes (%d items read): filter them first (filter), or sort the input before submitting", s.maxSortBytes, len(s.sorted)+1)
		}
		s.sorted = append(s.sorted, it)
	}
	slices.SortStableFunc(s.sorted, func(a, b sortedItem) int {
		return expr.CompareBy(s.sortBy, keyLookup(s.sortBy, a), keyLookup(s.sortBy, b))
	})
	return nil
}

// keySize replaces an array or object sort key by a stand-in of the same
// length (Prodigy orders them by length), so that a sorted item does not
// keep a decoded tree.
func keySize(v any) (any, bool) {
	switch x := v.(type) {
	case []any:
		return make([]any, len(x)), true
	case map[string]any:
		m := make(map[string]any, len(x))
		for k := range x {
			m[k] = nil
		}
		return m, true
	}
	return v, false
}

// keyLookup resolves the sort keys' paths to an item's stored keys.
func keyLookup(keys []expr.SortKey, it sortedItem) expr.Lookup {
	return func(p expr.Path) (any, bool) {
		for i, k := range keys {
			if slices.Equal(k.Path, p) {
				return it.keys[i], it.ok[i]
			}
		}
		return nil, false
	}
}

func (s *selectIter) next() (json.RawMessage, error) {
	for {
		if s.limit >= 0 && s.out >= s.limit {
			return nil, io.EOF
		}
		raw, v, err := s.nextSelected()
		if err != nil {
			return nil, err
		}
		if s.distinct != nil {
			key := expr.DistinctKey(expr.JSON(v), s.distinct)
			h := [2]uint64{maphash.String(s.seeds[0], key), maphash.String(s.seeds[1], key)}
			if _, dup := s.seen[h]; dup {
				continue
			}
			s.seen[h] = struct{}{}
		}
		if s.skipped < s.offset {
			s.skipped++
			continue
		}
		s.out++
		return raw, nil
	}
}

func (s *selectIter) close() error {
	s.sorted = nil
	return s.in.close()
}
