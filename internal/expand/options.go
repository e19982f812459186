package expand

import "fmt"

// DefaultMaxGroups bounds the number of distinct groups Count accepts. See
// WithMaxGroups.
const DefaultMaxGroups = 10_000

// Option configures Open and Count.
type Option func(*config) error

// DefaultMaxItems bounds the items of a spec. See WithMaxItems.
const DefaultMaxItems = 5_000_000

// DefaultMaxPathNodes bounds the work of a json_path that cannot be
// streamed. See WithMaxPathNodes.
const DefaultMaxPathNodes = 20_000_000

type config struct {
	maxDocumentBytes int64
	maxSortBytes     int64
	maxGroups        int
	maxItems         int64
	maxPathNodes     int64
	skipDupCheck     bool
	check            func(Item) error
}

func newConfig(opts []Option) (config, error) {
	c := config{maxDocumentBytes: DefaultMaxDocumentBytes, maxSortBytes: DefaultMaxSortBytes, maxGroups: DefaultMaxGroups,
		maxItems: DefaultMaxItems, maxPathNodes: DefaultMaxPathNodes}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// WithMaxDocumentBytes bounds the size of an input that must be read whole
// because its json_path cannot be streamed (see Open). Inputs read through a
// streamable json_path have no size limit. Defaults to
// DefaultMaxDocumentBytes (64 MiB); n must be positive.
func WithMaxDocumentBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: WithMaxDocumentBytes(%d): must be positive", ErrSpec, n)
		}
		c.maxDocumentBytes = n
		return nil
	}
}

// WithMaxGroups bounds how many distinct groups group_by may yield: Count
// fails with ErrTooManyGroups beyond it, so a group_by on a per-item field
// cannot make the group table as large as the input. Defaults to
// DefaultMaxGroups (10,000); n must be positive.
func WithMaxGroups(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: WithMaxGroups(%d): must be positive", ErrSpec, n)
		}
		c.maxGroups = n
		return nil
	}
}

// WithoutDuplicateCheck makes Open skip the duplicate-id check, for a second
// pass over an input that Count has already validated (the coordinator's
// publishing pass): it saves a hash-set insert per item. The Opener must
// return the same content as for Count.
func WithoutDuplicateCheck() Option {
	return func(c *config) error {
		c.skipDupCheck = true
		return nil
	}
}

// WithMaxItems bounds the number of items: Next fails with ErrTooManyItems
// when the input holds more, as soon as it reads the first one too many.
// Defaults to DefaultMaxItems (5,000,000); n must be positive.
func WithMaxItems(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: WithMaxItems(%d): must be positive", ErrSpec, n)
		}
		c.maxItems = n
		return nil
	}
}

// WithMaxPathNodes bounds the work of a json_path that cannot be streamed:
// the nodes it selects (duplicates included) and visits. Open fails with
// ErrPathTooCostly beyond it, before any item is yielded, and memory stays
// proportional to n. Defaults to DefaultMaxPathNodes (20,000,000); n must
// be positive.
func WithMaxPathNodes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: WithMaxPathNodes(%d): must be positive", ErrSpec, n)
		}
		c.maxPathNodes = n
		return nil
	}
}

// WithItemCheck makes Count call check for every item; an error fails the
// count as an *ItemError naming the item (the coordinator checks that each
// item's work message will fit the server's max_payload).
func WithItemCheck(check func(Item) error) Option {
	return func(c *config) error {
		c.check = check
		return nil
	}
}

// WithMaxSortBytes bounds what a spec with sort_by holds in memory to
// sort its items: the selected items' JSON (after filter) plus their sort
// keys. Next fails with ErrSortTooLarge beyond it, before any item is
// yielded. Defaults to DefaultMaxSortBytes (64 MiB); n must be positive.
func WithMaxSortBytes(n int64) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("%w: WithMaxSortBytes(%d): must be positive", ErrSpec, n)
		}
		c.maxSortBytes = n
		return nil
	}
}
