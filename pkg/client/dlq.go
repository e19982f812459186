package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// DLQList returns one page of the entries f selects (dlq.list); when the
// reply's More is set, the next page starts after its NextSeq.
func (c *Client) DLQList(ctx context.Context, f messages.DLQFilter) (*messages.DLQListReply, error) {
	return call[messages.DLQListReply](ctx, c, messages.EndpointDLQList, f)
}

// DLQGet returns the entry at DLQ stream sequence seq (dlq.get).
func (c *Client) DLQGet(ctx context.Context, seq uint64) (*messages.DLQEntryRef, error) {
	r, err := call[messages.DLQGetReply](ctx, c, messages.EndpointDLQGet, messages.DLQGetRequest{Seq: seq})
	if err != nil {
		return nil, err
	}
	if r.Entry == nil {
		return nil, fmt.Errorf("client: empty reply for DLQ entry %d", seq)
	}
	return r.Entry, nil
}

// DLQStats summarises the entries f selects (dlq.stats).
func (c *Client) DLQStats(ctx context.Context, f messages.DLQFilter) (*messages.DLQStats, error) {
	return call[messages.DLQStats](ctx, c, messages.EndpointDLQStats, f)
}

// DLQReplay starts a replay, or with DryRun counts what it would replay
// (dlq.replay). With Wait the call returns when the replay ends (or its
// wait_timeout passes; give ctx a longer deadline).
func (c *Client) DLQReplay(ctx context.Context, req messages.DLQReplayRequest) (*messages.DLQReplayStatus, error) {
	r, err := call[messages.DLQReplayReply](ctx, c, messages.EndpointDLQReplay, req)
	if err != nil {
		return nil, err
	}
	return &r.DLQReplayStatus, nil
}

// DLQReplayCancel stops a running replay and returns its final counts
// (dlq.replay.cancel).
func (c *Client) DLQReplayCancel(ctx context.Context, id string) (*messages.DLQReplayStatus, error) {
	r, err := call[messages.DLQReplayReply](ctx, c, messages.EndpointDLQReplayCancel, messages.DLQReplayCancelRequest{ReplayID: id})
	if err != nil {
		return nil, err
	}
	return &r.DLQReplayStatus, nil
}

// DLQReplays returns the status of replay id, or of every replay the
// coordinator knows (id ""), newest first (dlq.replays).
func (c *Client) DLQReplays(ctx context.Context, id string) ([]messages.DLQReplayStatus, error) {
	r, err := call[messages.DLQReplaysReply](ctx, c, messages.EndpointDLQReplays, messages.DLQReplaysRequest{ReplayID: id})
	if err != nil {
		return nil, err
	}
	return r.Replays, nil
}

// DLQPurge deletes the entries req selects; req.Confirm must be true
// (dlq.purge).
func (c *Client) DLQPurge(ctx context.Context, req messages.DLQPurgeRequest) (int64, error) {
	r, err := call[messages.DLQPurgeReply](ctx, c, messages.EndpointDLQPurge, req)
	if err != nil {
		return 0, err
	}
	return r.Purged, nil
}

// DLQExport writes the entries f selects to w as JSON lines (one
// {"seq": …, "entry": {…}} per line), page by page through dlq.list, and
// returns how many it wrote. f.Limit bounds the total (0 = all).
func (c *Client) DLQExport(ctx context.Context, f messages.DLQFilter, w io.Writer) (int64, error) {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	total, limit := int64(0), int64(f.Limit)
	for {
		page := f
		page.Limit = 1000
		if limit > 0 {
			page.Limit = int(min(limit-total, 1000))
		}
		r, err := c.DLQList(ctx, page)
		if err != nil {
			return total, err
		}
		for i := range r.Entries {
			if err := enc.Encode(&r.Entries[i]); err != nil {
				return total, err
			}
			total++
		}
		if !r.More || (limit > 0 && total >= limit) {
			break
		}
		f.AfterSeq = r.NextSeq
	}
	return total, bw.Flush()
}
