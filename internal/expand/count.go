package expand

import (
	"context"
	"io"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Count reads the items of spec once, checking all of them as Next does
// (malformed JSON, empty and duplicate ids, group_by), and returns how many
// there are, in total and per group (the key "" is the default group of a
// spec without group_by). The coordinator calls Count before it publishes
// anything, then Open again to publish.
//
// Memory stays flat in the number of items except for the duplicate-id set
// (a 64-bit hash per item) and the group table, which is bounded by
// WithMaxGroups.
func Count(ctx context.Context, spec *messages.JobSpec, open Opener, opts ...Option) (total int64, groups map[string]int64, err error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return 0, nil, err
	}
	src, err := openSource(ctx, spec, open, cfg, true)
	if err != nil {
		return 0, nil, err
	}
	defer src.Close()
	groups = make(map[string]int64)
	for {
		it, err := src.Next()
		if err == io.EOF {
			return total, groups, nil
		}
		if err != nil {
			return 0, nil, err
		}
		if _, ok := groups[it.Group]; !ok && len(groups) >= cfg.maxGroups {
			return 0, nil, &ItemError{Index: it.Index, ID: it.ID,
				Err: errorf(ErrTooManyGroups, "group %q: group_by %q yields more than %d groups", it.Group, spec.GroupBy, cfg.maxGroups)}
		}
		if cfg.check != nil {
			if err := cfg.check(it); err != nil {
				return 0, nil, &ItemError{Index: it.Index, ID: it.ID, Err: err}
			}
		}
		groups[it.Group]++
		total++
	}
}
