// Package placement moves consumers off a replica that stopped applying
// its stream's writes.
//
// A consumer reads its stream from the replica on its leader's node. On a
// node whose JetStream store is full (max_file_store reached) the replicas
// apply nothing their leaders send, and the node stands for no election;
// stream leaders there step down at their next write, but a consumer led
// there keeps delivering from its node's replica, which no longer grows:
// the work, the parked retries sourced back and the results stop reaching
// their readers while the other two nodes, a quorum, take every write. A
// node cut off the cluster looks the same from its leaders' side.
//
// A Sweeper asks each stream's leader for its replicas: one that has not
// answered the leader for StaleAfter is stale. Only the leader's answer
// counts: a replica that believes its group has no leader answers a
// stream info request too, from its own copy, naming no leader and itself
// current, and a full node that led a group and stepped down believes so
// (it drops the heartbeats of the leader elected after it). When such an
// answer comes first the sweep asks for the leader's (kvleader.StreamInfo),
// and keeps what earlier sweeps saw of a stream whose leader does not
// answer: forgetting it let the full node's answers, winning every other
// sweep, keep the node from ever being found stale. A leader elected
// after the node filled has never heard from it, and reports it as not
// current with no time since it was last heard (zero): such a replica is
// stale once the sweeps have seen it so, under the same leader, for
// StaleAfter. A node with a stale replica of any stream is stale for every
// stream: a stream led from it that takes no write keeps its leader there
// (and a consumer led from there delivers from that leader's old copy of
// another stream's sources). Each stream led from a stale node steps down, and each
// consumer led from one is moved: a replicated one steps down (the stale
// node stands for no election while full), an ephemeral one on a single
// replica (an ordered consumer: the coordinator's results reader, a KV
// watch) is deleted, and its owner makes it again from where it was
// (nats.go's ordered consumer does), on a node picked at random. A durable
// single-replica consumer is left alone, and so is a group with no quorum
// of nodes that are not stale (every node full): a stepdown there would
// only leave it without a leader. The coordinator's results hub does not
// wait for the sweep: it finds a consumer of its own that stopped
// delivering from the stream leader's last sequence and makes it again
// (internal/jobrun's results.go).
package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetfleet/jetfleet/internal/kvleader"
)

// Defaults of Config.
const (
	// DefaultInterval is how often Run sweeps.
	DefaultInterval = 5 * time.Second
	// DefaultStaleAfter is how long a replica has not answered its stream
	// leader before its consumers are moved: raft heartbeats go every
	// second, and the server calls a replica not current after 10 s.
	DefaultStaleAfter = 5 * time.Second
)

// Config says which streams to watch and how.
type Config struct {
	// JetStream is the connection's JetStream context (its API prefix or
	// domain is honoured).
	JetStream jetstream.JetStream
	// Streams returns the names of the streams to watch; called at every
	// sweep.
	Streams func() []string
	// Interval is how often Run sweeps. Defaults to DefaultInterval.
	Interval time.Duration
	// StaleAfter: a replica silent for this long is stale. Defaults to
	// DefaultStaleAfter.
	StaleAfter time.Duration
	// Log receives one line per consumer moved. Defaults to zerolog.Nop().
	Log *zerolog.Logger
}

// Move is one consumer, or one stream's leader, moved off a stale node.
type Move struct {
	// Consumer is "" for the stream's own leader, which stepped down.
	Stream, Consumer string
	// From is the stale node that led it.
	From string
	// Deleted is true for an ephemeral single-replica consumer, which was
	// deleted; false for a replicated one, which stepped down.
	Deleted bool
}

// Sweeper moves consumers off stale replicas (Sweep). It remembers, from
// one sweep to the next, the replicas a leader has never heard from. Not
// safe for concurrent use.
type Sweeper struct {
	cfg Config
	// Now is the sweeper's clock. Defaults to time.Now.
	Now func() time.Time
	// behind: stream/leader/replica -> since when sweeps have seen the
	// leader report the replica behind, and how far behind it was then.
	behind map[string]behindSince
	// touched: the keys of behind seen by the current sweep.
	touched map[string]bool
}

// NewSweeper returns a Sweeper of cfg.
func NewSweeper(cfg Config) *Sweeper { return &Sweeper{cfg: cfg} }

// Run sweeps every Interval until ctx ends. It returns ctx's error.
func Run(ctx context.Context, cfg Config) error {
	sw := NewSweeper(cfg)
	every := cfg.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	log := zerolog.Nop()
	if cfg.Log != nil {
		log = *cfg.Log
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, every)
		moves, err := sw.Sweep(sctx)
		cancel()
		for _, m := range moves {
			what, how := "consumer", "stepped down"
			if m.Consumer == "" {
				what = "stream"
			}
			if m.Deleted {
				how = "deleted (its owner makes it again elsewhere)"
			}
			log.Warn().Str("stream", m.Stream).Str("consumer", m.Consumer).Str("node", m.From).
				Msg(what + " led from a node that applies nothing (a full store, or a node cut off): " + how)
		}
		if err != nil && ctx.Err() == nil {
			log.Debug().Err(err).Msg("placement sweep")
		}
	}
}

// Sweep moves, once, the consumers of the streams that are led from a
// stale replica's node, and reports what it moved. A stream that cannot
// be read is skipped; the errors met are joined.
func (sw *Sweeper) Sweep(ctx context.Context) ([]Move, error) {
	cfg := sw.cfg
	sw.touched = map[string]bool{}
	var moves []Move
	var errs []error
	// First the stale nodes, as any stream's leader sees them: a node
	// that applies nothing does so for every stream it holds. A stream
	// whose leader is on that node and takes no write keeps its leader
	// there, and reports its replicas current.
	stale := map[string]bool{}
	type held struct {
		name string
		s    jetstream.Stream
		ci   *jetstream.ClusterInfo
		// own: the stale nodes as this stream's leader reports them
		own map[string]bool
	}
	var streams []held
	for _, name := range cfg.Streams() {
		s, err := cfg.JetStream.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("stream %s: %w", name, err))
			continue
		}
		info := s.CachedInfo()
		if !kvleader.Led(info) {
			// A replica that believes the group has no leader answered
			// first (a full node does, from its old copy, reporting
			// itself current): ask for the leader's answer.
			if li, err := kvleader.StreamInfo(ctx, cfg.JetStream, name); err == nil {
				info = li
			}
		}
		ci := info.Cluster
		if ci == nil || len(ci.Replicas) == 0 {
			continue // one replica: nowhere to move to
		}
		var own map[string]bool
		if kvleader.Led(info) {
			own = sw.staleOf(name, ci)
		} else {
			// No leader heard: what earlier sweeps saw of its replicas
			// stands, and this answer says nothing of them. Its
			// consumers led from a node stale by the other streams'
			// leaders still move (below).
			sw.keep(name)
			own = map[string]bool{}
		}
		for r := range own {
			stale[r] = true
		}
		streams = append(streams, held{name, s, ci, own})
	}
	sw.forget()
	if len(stale) == 0 {
		return nil, errors.Join(errs...)
	}
	for _, h := range streams {
		if stale[h.ci.Leader] && movable(h.ci, stale) {
			err := request(ctx, cfg.JetStream, "STREAM.LEADER.STEPDOWN."+h.name)
			if err != nil {
				errs = append(errs, fmt.Errorf("stream %s: %w", h.name, err))
			} else {
				moves = append(moves, Move{Stream: h.name, From: h.ci.Leader})
			}
		}
		lister := h.s.ListConsumers(ctx)
		for ci := range lister.Info() {
			if ci.Cluster == nil || !stale[ci.Cluster.Leader] {
				continue
			}
			m := Move{Stream: h.name, Consumer: ci.Name, From: ci.Cluster.Leader}
			var err error
			switch {
			case len(ci.Cluster.Replicas) > 0:
				if !movable(ci.Cluster, stale) {
					continue
				}
				err = request(ctx, cfg.JetStream, "CONSUMER.LEADER.STEPDOWN."+h.name+"."+ci.Name)
			case ci.Config.Durable == "" && h.own[ci.Cluster.Leader] && movable(h.ci, stale):
				// Deleted only where this stream's own leader finds
				// the node's copy silent: the consumer's reader would
				// get an old copy, and gets it anew elsewhere.
				m.Deleted = true
				err = request(ctx, cfg.JetStream, "CONSUMER.DELETE."+h.name+"."+ci.Name)
			default:
				continue // a durable on one replica has nowhere to go
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("consumer %s > %s: %w", h.name, ci.Name, err))
				continue
			}
			moves = append(moves, m)
		}
		if err := lister.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			errs = append(errs, fmt.Errorf("stream %s's consumers: %w", h.name, err))
		}
	}
	return moves, errors.Join(errs...)
}

// staleReplicas names the replicas of ci (as its leader sees them) that
// have not answered the leader for staleAfter and are not known offline.
func staleReplicas(ci *jetstream.ClusterInfo, staleAfter time.Duration) map[string]bool {
	if ci == nil || ci.Leader == "" {
		return nil
	}
	var stale map[string]bool
	for _, p := range ci.Replicas {
		if p == nil || p.Current || p.Offline || p.Active < staleAfter {
			continue
		}
		if stale == nil {
			stale = map[string]bool{}
		}
		stale[p.Name] = true
	}
	return stale
}

// movable reports whether a group (a stream's or a consumer's: its leader
// and replicas) has a quorum of nodes that are not stale: one led from a
// stale node can then elect another leader once it steps down, and an
// ordered consumer deleted there is made again on a stream that answers. When every node is
// full (each leader's followers silent) none has: a stepdown would only
// leave the group without a leader.
func movable(ci *jetstream.ClusterInfo, stale map[string]bool) bool {
	if ci == nil || len(ci.Replicas) == 0 {
		return false
	}
	peers, good := 1+len(ci.Replicas), 0
	if ci.Leader != "" && !stale[ci.Leader] {
		good++ // a stream led from a node with room, whose consumer is elsewhere
	}
	for _, p := range ci.Replicas {
		if p != nil && !stale[p.Name] && !p.Offline {
			good++
		}
	}
	return good >= peers/2+1
}

// staleOf returns the stale replicas of stream name, whose group ci is:
// those its leader has not heard from for StaleAfter, and those it has
// reported behind, never catching up, for StaleAfter (over this sweep and
// earlier ones).
func (sw *Sweeper) staleOf(name string, ci *jetstream.ClusterInfo) map[string]bool {
	staleAfter := sw.cfg.StaleAfter
	if staleAfter <= 0 {
		staleAfter = DefaultStaleAfter
	}
	now := time.Now
	if sw.Now != nil {
		now = sw.Now
	}
	own := staleReplicas(ci, staleAfter)
	if own == nil {
		own = map[string]bool{}
	}
	if sw.behind == nil {
		sw.behind = map[string]behindSince{}
	}
	for _, p := range behindReplicas(ci) {
		key := name + "/" + ci.Leader + "/" + p.Name
		b, ok := sw.behind[key]
		if !ok || p.Lag < b.lag {
			b = behindSince{first: now(), lag: p.Lag} // new, or catching up: count anew
		}
		sw.behind[key] = b
		if sw.touched != nil {
			sw.touched[key] = true
		}
		if now().Sub(b.first) >= staleAfter {
			own[p.Name] = true
		}
	}
	return own
}

// keep marks what the sweeps saw of stream name's replicas as seen by the
// current sweep: its leader did not answer this one, and a sweep that
// dropped it would count anew a replica behind for good.
func (sw *Sweeper) keep(name string) {
	for key := range sw.behind {
		if strings.HasPrefix(key, name+"/") && sw.touched != nil {
			sw.touched[key] = true
		}
	}
}

// forget drops the replicas the current sweep did not see behind: current
// again, or their leader moved.
func (sw *Sweeper) forget() {
	for key := range sw.behind {
		if !sw.touched[key] {
			delete(sw.behind, key)
		}
	}
}

// behindSince is a replica seen behind its leader: since when, and how far
// behind it was then.
type behindSince struct {
	first time.Time
	lag   uint64
}

// behindReplicas are the replicas of ci that its leader reports behind
// (not current) and not known offline. One seen behind for StaleAfter,
// never catching up (its lag never smaller than when first seen), is
// stale even if it answers now and then: a node whose store is full
// answers some heartbeats and applies nothing, and a node its leader has
// never heard from since its election looks the same.
func behindReplicas(ci *jetstream.ClusterInfo) []*jetstream.PeerInfo {
	if ci == nil || ci.Leader == "" {
		return nil
	}
	var out []*jetstream.PeerInfo
	for _, p := range ci.Replicas {
		if p != nil && !p.Current && !p.Offline {
			out = append(out, p)
		}
	}
	return out
}

// request makes one JetStream API request (a stepdown, a delete) and
// returns its error, waiting at most requestWait: the leader asked may be
// cut off and never answer.
func request(ctx context.Context, js jetstream.JetStream, api string) error {
	ctx, cancel := context.WithTimeout(ctx, requestWait)
	defer cancel()
	msg, err := js.Conn().RequestWithContext(ctx, apiPrefix(js)+api, nil)
	if err != nil {
		return err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("%s reply: %w", api, err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	return nil
}

// requestWait bounds one stepdown or delete.
const requestWait = 2 * time.Second

// apiPrefix is the subject prefix of js's JetStream API requests.
func apiPrefix(js jetstream.JetStream) string {
	o := js.Options()
	switch {
	case o.Domain != "":
		return "$JS." + o.Domain + ".API."
	case o.APIPrefix != "":
		return strings.TrimSuffix(o.APIPrefix, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}
