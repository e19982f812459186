package prodigystep

import (
	"encoding/json"
	"maps"
	"math"
	"slices"

	"github.com/jetfleet/jetfleet/internal/stepkind"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// HandlerOptions reads the options of a step's on_failure object h
// (Prodigy's handler), beside its shell, claude or commands, and returns
// the fields they set on the step's fallback
// (retry_config.on_failure.fallback): commit_required, fail_workflow,
// max_attempts, handler_failure_fatal and timeout. Paths in the Result are
// relative to the on_failure object.
//
// max_attempts (or max_retries, Prodigy's other name of it) above 1 is a
// fix-then-retry loop in one delivery: the step runs, the handler after
// each failed run, and the step again, up to max_attempts runs (Prodigy's
// book: a handler, then the original command again while attempts
// remain). handler_failure_fatal ends that loop at a handler that fails;
// timeout (seconds) bounds each run of the handler. retry_original,
// which Prodigy no longer reads, and strategy are accepted without
// effect; a handler's capture is refused (not yet).
func HandlerOptions(h map[string]any) (map[string]any, *Result) {
	r, fb := &Result{}, map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(h)) {
		v := h[k]
		switch k {
		case "shell", "claude", "commands":
		case "max_attempts", "max_retries":
			r.maxAttempts(h, k, fb)
		case "commit_required", "fail_workflow", "handler_failure_fatal", "retry_original":
			b, isBool := v.(bool)
			switch {
			case !isBool:
				r.addf(k, "expected true or false, got %v", v)
			case k == "retry_original":
				r.warnf(k, "has no effect: max_attempts alone decides whether the step runs again after its handler (Prodigy no longer reads retry_original)")
			case !b:
			case k == "fail_workflow":
				fb[k] = true
				r.notef(k, "true: the step fails after its handler runs, whatever the handler's outcome: the item fails, and error_policy decides what follows (a standard workflow's job fails)")
			case k == "handler_failure_fatal":
				fb[k] = true
				r.notef(k, "true: a handler that fails fails the step at once, without running it again (jetfleet's fallback that fails always fails its step)")
			default:
				fb[k] = true
			}
		case "timeout":
			r.handlerTimeout(v, fb)
		case "strategy":
			r.warnf(k, "has no effect: the handler's commands run in turn whatever the strategy")
		case "capture":
			r.addf(k, "not yet: capturing a handler's output (capture the step's own output with its capture, or write to a file in the handler)")
		default:
			r.addf(k, "not yet: a step's on_failure takes shell, claude or commands, max_attempts (max_retries), fail_workflow, handler_failure_fatal, timeout, commit_required, strategy and retry_original")
		}
	}
	return fb, r
}

// maxAttempts reads max_attempts, or max_retries (k), into fb.
func (r *Result) maxAttempts(h map[string]any, k string, fb map[string]any) {
	if _, both := h["max_attempts"]; both && k == "max_retries" {
		r.addf(k, "set one of max_attempts and max_retries (Prodigy reads them as one)")
		return
	}
	n, isNum := h[k].(json.Number)
	v, err := n.Int64()
	if !isNum || err != nil || v < 1 || v > stepkind.MaxFallbackRuns {
		r.addf(k, "expected a number of runs from 1 to %d, got %v", stepkind.MaxFallbackRuns, h[k])
		return
	}
	if v == 1 {
		r.notef(k, "1: the step runs once; its handler runs when it fails")
		return
	}
	fb["max_attempts"] = n
	r.notef(k, "%d: the step runs up to %d times in one delivery, in the same directory, its handler after each failed run: "+
		"it succeeds when a run does (retry_config.on_failure.fallback.max_attempts); its retry_config and error_policy apply once the runs are spent", v, v)
}

// handlerTimeout reads a handler's timeout: seconds, as Prodigy writes it,
// or a duration.
func (r *Result) handlerTimeout(v any, fb map[string]any) {
	var d messages.Duration
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		if err != nil || f <= 0 || f > math.MaxInt64/1e9 {
			r.addf("timeout", "expected a number of seconds greater than 0, got %s", x)
			return
		}
		d = messages.Duration(f * 1e9)
	case string:
		var err error
		if d, err = messages.ParseDuration(x); err != nil || d <= 0 {
			r.addf("timeout", "expected a number of seconds or a duration greater than 0, got %q", x)
			return
		}
	default:
		r.addf("timeout", "expected a number of seconds, got %v", v)
		return
	}
	fb["timeout"] = d.String()
	r.notef("timeout", "%s: each run of the handler is bounded by it, not by the step's timeout (retry_config.on_failure.fallback.timeout)", d)
}
