package replay

// A replay holds the jobs it replays (those its plan counted) until it
// ends: a held job does not complete. Without the hold, a job reopened by
// the replay's first markers could complete again when those items
// finish, while the replay is still reopening others: its completion
// would purge their freshly republished work messages (the map's end
// purges what is queued), and a reduce would run once per flap.

// holdJobs keeps jobs from completing until releaseJobs.
func (s *Replays) holdJobs(jobs []string) {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	for _, j := range jobs {
		s.holds[j]++
	}
}

// releaseJobs drops the holds and lets the jobs complete if they are done.
func (s *Replays) releaseJobs(jobs []string) {
	var free []string
	s.holdMu.Lock()
	for _, j := range jobs {
		if s.holds[j]--; s.holds[j] <= 0 {
			delete(s.holds, j)
			free = append(free, j)
		}
	}
	s.holdMu.Unlock()
	for _, j := range free {
		s.jobs.Recheck(j)
	}
}

// Holding reports whether a replay holds job: the job may not complete.
func (s *Replays) Holding(job string) bool {
	s.holdMu.Lock()
	defer s.holdMu.Unlock()
	return s.holds[job] > 0
}
