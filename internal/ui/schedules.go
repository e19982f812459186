package ui

import (
	"net/http"
	"sort"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// schedulesData is the schedules page: every schedule with its timing,
// next run, last run and skipped ticks (docs/schedules.md).
type schedulesData struct {
	Schedules []scheduleRow
	Err       string
}

// scheduleRow is one schedule as the page shows it.
type scheduleRow struct {
	messages.Schedule
	Timing  string
	LastRun *messages.ScheduleRun
	Skipped int64
}

func (s *Server) pageSchedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	d := &schedulesData{}
	list, err := s.client.ScheduleList(ctx)
	if err != nil {
		d.Err = err.Error()
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	for _, sc := range list {
		row := scheduleRow{Schedule: sc, Timing: scheduleTiming(&sc.ScheduleSpec)}
		if n := len(sc.Runs); n > 0 {
			row.LastRun = &sc.Runs[n-1]
		}
		for _, n := range sc.Skipped {
			row.Skipped += n
		}
		d.Schedules = append(d.Schedules, row)
	}
	s.render(w, r, http.StatusOK, "schedules", &page{Title: "Schedules", Nav: "schedules", Data: d})
}

// scheduleTiming says when a schedule fires: its cron expression with the
// time zone, or its interval.
func scheduleTiming(sc *messages.ScheduleSpec) string {
	if sc.Cron != "" {
		tz := sc.TZ
		if tz == "" {
			tz = "UTC"
		}
		return "cron " + sc.Cron + " (" + tz + ")"
	}
	return "every " + sc.Every.String()
}
