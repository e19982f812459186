package jobspec

import (
	"maps"
	"strings"

	"github.com/jetfleet/jetfleet/internal/prodigystep"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// stepOnFailure rewrites a step's own on_failure, Prodigy's handler, into
// retry_config.on_failure:
//
//   - true: continue (the item goes on); false: stop, the default;
//   - a command: "cleanup.sh" a shell fallback, "/fix-it" (a slash first,
//     as Prodigy reads it) a claude one;
//   - a list of shell commands: one fallback running them in turn, stopping
//     at the first that fails;
//   - {shell: ...}, {claude: ...} or {commands: [...]} (a list as above),
//     with options (internal/prodigystep.HandlerOptions): max_attempts
//     (max_retries), the step's runs in one delivery, the fallback after
//     each failed one; commit_required (the fallback must leave a
//     commit); fail_workflow (true: the step fails after the fallback);
//     handler_failure_fatal; timeout.
//
// The fallback runs when the step gives up (and between its runs, with
// max_attempts); if it succeeds the item goes on with the next step.
func (rw *rewrite) stepOnFailure(p string, st map[string]any) {
	of, ok := st["on_failure"]
	if !ok {
		return
	}
	delete(st, "on_failure")
	op := messages.JoinPath(p, "on_failure")
	wp := rw.written(op)
	rc, _ := st["retry_config"].(map[string]any)
	if st["retry_config"] != nil && rc == nil {
		return // the decoder reports retry_config
	}
	if rc == nil {
		rc = map[string]any{}
		st["retry_config"] = rc
	}
	if rc["on_failure"] != nil {
		rw.addf(wp, "set once: here (a command run when the step gives up) or in retry_config.on_failure")
		return
	}
	canon := messages.JoinPath(p, "retry_config.on_failure")
	var kind, text, from string // kind: "command" (shell) or "claude"
	var opts map[string]any     // the handler's options (handlerObject)
	switch x := of.(type) {
	case bool:
		if x {
			rc["on_failure"] = messages.OnFailureContinue
			rw.steps = append(rw.steps, rename{from: canon, to: op})
			rw.notef(wp, "true: the item goes on with the next step when this one gives up (retry_config.on_failure: continue)")
		}
		return
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case messages.OnFailureStop, messages.OnFailureContinue, messages.OnFailureFallback:
			rw.addf(wp, `a step's on_failure is a command run when the step gives up (or true to go on); stop, continue and {fallback: {command: "..."}} go in retry_config.on_failure`)
			return
		}
		kind, text, from = handlerKind(x), x, op
	case []any:
		kind, text, ok = rw.handlerList(wp, x)
		if !ok {
			return
		}
		from = op
	case map[string]any:
		kind, text, from, opts, ok = rw.handlerObject(op, wp, x)
		if !ok {
			return
		}
	default:
		rw.addf(wp, `a step's on_failure is true, a command, a list of commands or {shell: "..."} / {claude: "..."}; stop, continue and {fallback: {command: "..."}} go in retry_config.on_failure`)
		return
	}
	if strings.TrimSpace(text) == "" && kind != "steps" {
		rw.addf(wp, "the command to run when the step gives up is empty")
		return
	}
	fb := map[string]any{kind: text}
	if kind == "steps" {
		fb = map[string]any{"steps": prodigystep.HandlerSteps(of)}
		rw.notef(wp, "holds a claude command: its commands run in turn as the fallback's steps, stopping at the first that fails")
		if opts["commit_required"] == true {
			rw.addf(wp, "not yet: commit_required with a list of handler commands that holds a claude command")
			return
		}
	}
	maps.Copy(fb, opts)
	rc["on_failure"] = map[string]any{messages.OnFailureFallback: fb}
	rw.steps = append(rw.steps,
		rename{from: canon + ".fallback." + kind, to: from},
		rename{from: canon, to: op})
	then := "the item goes on with the next step if it succeeds"
	if fb["fail_workflow"] == true {
		then = "then the step fails (fail_workflow)"
	}
	rw.notef(wp, `is the step's fallback (retry_config.on_failure: {fallback: {%s: ...}}): it runs when the step gives up; %s`, kind, then)
}

// handlerKind is how Prodigy reads a handler written as a string: a claude
// command when it starts with a slash, else a shell command.
func handlerKind(s string) string {
	if strings.HasPrefix(strings.TrimSpace(s), "/") {
		return "claude"
	}
	return "command"
}

// handlerList reads a list of handler commands: one runs as it is; several
// shell commands run in turn as one script, stopping at the first failure.
func (rw *rewrite) handlerList(wp string, list []any) (kind, text string, ok bool) {
	var cmds []string
	claude := ""
	for i, e := range list {
		ep := messages.IndexPath(wp, i)
		switch x := e.(type) {
		case string:
			if handlerKind(x) == "claude" {
				claude = x
			} else {
				cmds = append(cmds, x)
			}
		case map[string]any:
			for _, k := range sortedKeys(x) {
				if k != "shell" && k != "claude" {
					rw.addf(messages.JoinPath(ep, k), "not yet: a handler command of a list is a string, {shell: \"...\"} or {claude: \"...\"}")
					return "", "", false
				}
			}
			if s, isStr := x["shell"].(string); isStr {
				cmds = append(cmds, s)
			}
			if s, isStr := x["claude"].(string); isStr {
				claude = s
			}
		default:
			rw.addf(ep, "expected a command, got %v", e)
			return "", "", false
		}
	}
	switch {
	case claude != "" && len(list) == 1:
		return "claude", claude, true
	case claude != "":
		return "steps", "", true // the fallback's steps: see stepOnFailure
	case len(cmds) == 1:
		return "command", cmds[0], true
	}
	return "command", "set -e\n" + strings.Join(cmds, "\n"), true
}

// handlerObject reads {shell | claude | commands} and the handler's
// options (internal/prodigystep.HandlerOptions), the fields they set on
// the fallback in opts.
func (rw *rewrite) handlerObject(op, wp string, m map[string]any) (kind, text, from string, opts map[string]any, ok bool) {
	opts, r := prodigystep.HandlerOptions(m)
	rw.merge(wp, r)
	if len(r.Problems) > 0 {
		return "", "", "", nil, false
	}
	sh, hasShell := m["shell"]
	cl, hasClaude := m["claude"]
	if list, isList := m["commands"].([]any); isList && !hasShell && !hasClaude {
		kind, text, ok = rw.handlerList(messages.JoinPath(wp, "commands"), list)
		return kind, text, messages.JoinPath(op, "commands"), opts, ok
	}
	switch {
	case hasShell && hasClaude:
		rw.addf(wp, "not yet: both shell and claude in one handler (a fallback is one command)")
	case hasClaude:
		if s, isStr := cl.(string); isStr {
			return "claude", s, messages.JoinPath(op, "claude"), opts, true
		}
		rw.addf(messages.JoinPath(wp, "claude"), "expected a string, got %v", cl)
	case hasShell:
		if s, isStr := sh.(string); isStr {
			return "command", s, messages.JoinPath(op, "shell"), opts, true
		}
		rw.addf(messages.JoinPath(wp, "shell"), "expected a string, got %v", sh)
	default:
		rw.addf(wp, `a step's on_failure handler needs shell or claude: {shell: "..."} or {claude: "..."}`)
	}
	return "", "", "", nil, false
}
