package dlq

import (
	"context"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/dlq"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Errors.
var (
	// ErrBadFilter is wrapped by the error of a filter a Reader refuses;
	// the error names the field.
	ErrBadFilter = dlq.ErrBadFilter
	// ErrEntryNotFound: no dead letter at that sequence.
	ErrEntryNotFound = dlq.ErrEntryNotFound
)

// Filter selects dead letters: every field set must match (job, reason,
// error class, signature prefix, a case-insensitive text, a time range,
// a limit, and AfterSeq for paging).
type Filter = messages.DLQFilter

// Page is one page of [Reader.List]: Entries, and when More is set the
// next page starts after NextSeq (set Filter.AfterSeq to it).
type Page = dlq.Page

// Reader reads the dead letters of one jetfleet prefix. Every call scans
// the stream once, up to its last entry when the call starts. It is safe
// for concurrent use.
type Reader struct{ in *dlq.Inspector }

// NewReader returns a Reader of the DLQ stream of prefix ("" is
// jetfleet's default, "fleet"), or an error naming a bad prefix.
func NewReader(js jetstream.JetStream, prefix string) (*Reader, error) {
	names, err := messages.NewNames(prefix)
	if err != nil {
		return nil, err
	}
	return &Reader{in: dlq.NewInspector(js, names)}, nil
}

// List returns the first page of entries f selects after f.AfterSeq; a
// scan examines a bounded number of entries, so a page may be short with
// More set.
func (r *Reader) List(ctx context.Context, f Filter) (*Page, error) { return r.in.List(ctx, f) }

// Get returns the entry at stream sequence seq, or [ErrEntryNotFound].
func (r *Reader) Get(ctx context.Context, seq uint64) (*messages.DLQEntryRef, error) {
	return r.in.Get(ctx, seq)
}

// Stats counts the entries f selects by job, reason, error class and
// signature (the most frequent signatures).
func (r *Reader) Stats(ctx context.Context, f Filter) (*messages.DLQStats, error) {
	return r.in.Stats(ctx, f)
}

// Export writes every entry f selects to w as JSON lines (one
// messages.DLQEntryRef a line) and returns how many it wrote.
func (r *Reader) Export(ctx context.Context, f Filter, w io.Writer) (int64, error) {
	return r.in.Export(ctx, f, w)
}

// ParseTime reads a filter's since or until as `fleetctl dlq` takes it:
// RFC 3339, a date (2026-03-01, local time), or a duration before now
// ("90m", "2d"). "" is the zero time (no bound).
func ParseTime(s string, now time.Time) (time.Time, error) { return dlq.ParseTime(s, now) }
