// Package schedule computes when a schedule's ticks fall and what the
// scheduler does with the ticks that are due: a pure function of the
// schedule's record and the time it is given ([Plan]), so that the
// coordinator's leader applies it by compare-and-set and tests run it on
// any clock.
//
// A schedule is a cron expression in a named time zone (parsed by
// github.com/robfig/cron/v3: five fields, an optional leading seconds
// field, and the macros @yearly, @monthly, @weekly, @daily, @hourly) or a
// fixed interval anchored at the schedule's creation time. Neither kind
// reads the clock.
package schedule
