package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// pauseButtons says whether the job page offers to pause the job (its map
// phase runs and it is not paused) and to resume it (it is paused itself;
// a job paused by its pool is resumed with the pool, fleetctl pool resume).
func (s *Server) pauseButtons(st *messages.JobStatus) (canPause, canResume bool) {
	if s.cfg.ReadOnly || messages.TerminalState(st.State) || st.MapReason != "" {
		return false, false
	}
	if st.State == messages.StatePaused {
		return false, st.PausedBy == messages.PausedByJob
	}
	return true, false
}

func (s *Server) postPause(w http.ResponseWriter, r *http.Request) {
	s.pauseAction(w, r, "pausing", s.client.JobPause)
}

func (s *Server) postResume(w http.ResponseWriter, r *http.Request) {
	s.pauseAction(w, r, "resuming", s.client.JobResume)
}

// pauseAction calls pause or resume for the job of the path and shows
// the job again.
func (s *Server) pauseAction(w http.ResponseWriter, r *http.Request, what string, call func(context.Context, string) (*messages.JobStatus, error)) {
	id := s.jobID(w, r)
	if id == "" {
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	if _, err := call(ctx, id); err != nil {
		s.fail(w, r, what+" job "+id, err)
		return
	}
	s.log.Info().Str("job_id", id).Msg(what + " job from the dashboard")
	http.Redirect(w, r, "/jobs/"+url.PathEscape(id), http.StatusSeeOther)
}

// poolPausedSince reads the pool's pause key (nil: running, or unknown).
func (s *Server) poolPausedSince(ctx context.Context, pool string) *time.Time {
	kv, err := s.js.KeyValue(ctx, s.names.PauseBucket())
	if err != nil {
		return nil
	}
	e, err := kv.Get(ctx, wire.PausePoolKey(pool))
	if err != nil {
		return nil
	}
	var rec wire.PauseRecord
	if json.Unmarshal(e.Value(), &rec) != nil || rec.At.IsZero() {
		rec.At = e.Created()
	}
	return &rec.At
}

func (s *Server) postPoolPause(w http.ResponseWriter, r *http.Request) {
	s.poolAction(w, r, "pausing", s.client.PoolPause)
}

func (s *Server) postPoolResume(w http.ResponseWriter, r *http.Request) {
	s.poolAction(w, r, "resuming", s.client.PoolResume)
}

// poolAction calls pause or resume for the pool of the path and shows the
// agents page again.
func (s *Server) poolAction(w http.ResponseWriter, r *http.Request, what string, call func(context.Context, string) (*messages.PoolPauseReply, error)) {
	pool := r.PathValue("pool")
	if err := messages.ValidPool(pool); err != nil {
		s.badRequest(w, r, "pool: "+err.Error())
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	if _, err := call(ctx, pool); err != nil {
		s.fail(w, r, what+" pool "+pool, err)
		return
	}
	s.log.Info().Str("pool", pool).Msg(what + " pool from the dashboard")
	http.Redirect(w, r, "/agents", http.StatusSeeOther)
}
