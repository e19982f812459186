package jobrun

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetfleet/jetfleet/internal/kvcas"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// jobStore reads and writes job records in the fleet_jobs bucket. The
// leading coordinator is the only writer; a job's runner writes its record
// with compare-and-set (update), so that a deposed leader's last write
// cannot silently replace its successor's.
type jobStore struct {
	kv jetstream.KeyValue
	// leader reads a key from the bucket's stream leader (kvleader).
	leader func(ctx context.Context, key string) ([]byte, uint64, error)
	// maxBytes is the largest record the server takes (nil: unchecked).
	maxBytes func() int
	// index, when set, learns of every record this store writes, so that
	// jobs.list shows it before the bucket watch delivers it.
	index *jobIndex
}

var errNoJob = errors.New("coordinator: no such job")

func (s *jobStore) get(ctx context.Context, id string) (*wire.JobRecord, error) {
	rec, _, err := s.getRev(ctx, id)
	return rec, err
}

// getRev returns a job's record and its revision.
func (s *jobStore) getRev(ctx context.Context, id string) (*wire.JobRecord, uint64, error) {
	if messages.ValidToken(id) != nil {
		// Not a job id (so no job), and not a key to send to the server: a
		// long one would exceed its control line and close the connection.
		return nil, 0, errNoJob
	}
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, errNoJob
	}
	if err != nil {
		return nil, 0, err
	}
	var rec wire.JobRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, fmt.Errorf("job record %s: %w", id, err)
	}
	return &rec, e.Revision(), nil
}

// getFromLeader is get from the bucket's stream leader, which has applied
// every acknowledged write: never older than a record a client was shown.
// Without a leader reader (tests) it is get.
func (s *jobStore) getFromLeader(ctx context.Context, id string) (*wire.JobRecord, error) {
	if s.leader == nil {
		return s.get(ctx, id)
	}
	if messages.ValidToken(id) != nil {
		return nil, errNoJob
	}
	data, _, err := s.leader(ctx, id)
	if err != nil {
		return nil, err
	}
	if data == nil {
		return nil, errNoJob
	}
	var rec wire.JobRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("job record %s: %w", id, err)
	}
	return &rec, nil
}

// replace stores rec in place of the record at revision rev (0: there is
// none); replaced=false when the key changed meanwhile (another write won).
// Intake replaces only a rejected record (its id is free again); retention
// marks a settled job's cleanup.
func (s *jobStore) replace(ctx context.Context, rec *wire.JobRecord, rev uint64) (replaced bool, err error) {
	_, replaced, err = s.update(ctx, rec, rev)
	return replaced, err
}

// update is replace, returning the new revision.
func (s *jobStore) update(ctx context.Context, rec *wire.JobRecord, rev uint64) (newRev uint64, ok bool, err error) {
	data, err := s.encode(rec)
	if err != nil {
		return 0, false, err
	}
	newRev, err = kvcas.Write(ctx, s.kv, rec.Status.ID, data, rev)
	if kvcas.IsConflict(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if s.index != nil {
		s.index.put(newRev, &rec.Status)
	}
	return newRev, true, nil
}

// remove deletes a job's record if it is still at revision rev. The purge
// leaves one marker, which expires after markerTTL: watchers see the
// deletion, and then the bucket holds nothing of the job.
func (s *jobStore) remove(ctx context.Context, id string, rev uint64, markerTTL time.Duration) (removed bool, err error) {
	err = s.kv.Purge(ctx, id, jetstream.LastRevision(rev), jetstream.PurgeTTL(markerTTL))
	if kvcas.IsConflict(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if s.index != nil {
		s.index.remove(id, math.MaxUint64)
	}
	return true, nil
}

// create stores a new record; created=false when the id already exists.
func (s *jobStore) create(ctx context.Context, rec *wire.JobRecord) (created bool, err error) {
	return s.replace(ctx, rec, 0)
}

func (s *jobStore) put(ctx context.Context, rec *wire.JobRecord) error {
	_, err := s.putRev(ctx, rec)
	return err
}

// putRev writes rec whatever the key holds and returns the new revision.
func (s *jobStore) putRev(ctx context.Context, rec *wire.JobRecord) (uint64, error) {
	data, err := s.encode(rec)
	if err != nil {
		return 0, err
	}
	rev, err := s.kv.Put(ctx, rec.Status.ID, data)
	if err == nil && s.index != nil {
		s.index.put(rev, &rec.Status)
	}
	return rev, err
}

// storedRecord is a job record and its revision.
type storedRecord struct {
	wire.JobRecord
	rev uint64
}

// encode encodes rec within the server's max_payload: a record that would
// be larger (which acceptance checks prevent) sheds its error report and
// problems' detail rather than fail to be written (see fitRecord).
func (s *jobStore) encode(rec *wire.JobRecord) ([]byte, error) {
	data, err := json.Marshal(rec)
	if err != nil || s.maxBytes == nil || len(data) <= s.maxBytes() {
		return data, err
	}
	return fitRecord(rec, s.maxBytes())
}

// list returns every job record, newest submission first.
func (s *jobStore) list(ctx context.Context) ([]*storedRecord, error) {
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var recs []*storedRecord
	for k := range lister.Keys() {
		rec, rev, err := s.getRev(ctx, k)
		if errors.Is(err, errNoJob) {
			continue
		}
		if err != nil {
			_ = lister.Stop()
			return nil, err
		}
		recs = append(recs, &storedRecord{JobRecord: *rec, rev: rev})
	}
	slices.SortFunc(recs, func(a, b *storedRecord) int {
		return b.Status.SubmittedAt.Compare(a.Status.SubmittedAt)
	})
	return recs, nil
}

func sortErrors(es []messages.ErrorSummary) {
	slices.SortFunc(es, func(a, b messages.ErrorSummary) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Signature, b.Signature))
	})
}
