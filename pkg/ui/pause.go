package ui

import (
	"context"
	"net/http"
	"net/url"

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
	s.pauseAction(w, r, "pausing", s.client.Pause)
}

func (s *Server) postResume(w http.ResponseWriter, r *http.Request) {
	s.pauseAction(w, r, "resuming", s.client.Resume)
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
