package jobspec

import (
	"strings"

	"github.com/jetfleet/jetfleet/internal/expr"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// capture checks a step's capture fields and records the variable it
// captures, which the steps after it may read.
func (v *validator) capture(p string, st *messages.Step) {
	cp := messages.JoinPath(p, "capture")
	if st.Capture == "" {
		if st.CaptureFormat != "" {
			v.addf(messages.JoinPath(p, "capture_format"), "needs capture, the variable's name")
		}
		if st.CaptureStreams != nil {
			v.addf(messages.JoinPath(p, "capture_streams"), "needs capture, the variable's name")
		}
		return
	}
	if wire.IsOutputCapture(st.Capture) {
		return // the previous step's output is ${shell.output} in any case
	}
	switch t, err := wire.ParseTemplate("${" + st.Capture + "}"); {
	case err != nil || len(t.Parts) != 1 || len(t.Parts[0].Ref) != 1:
		v.addf(cp, "%q is not a variable name (a letter or _, then letters, digits, _ or -)", st.Capture)
		return
	case !wire.IsVarRef(t.Parts[0].Ref):
		v.addf(cp, "%q is a reference of its own (${%s}): name the variable otherwise", st.Capture, st.Capture)
		return
	}
	switch st.CaptureFormat {
	case "", wire.CaptureString, wire.CaptureNumber, wire.CaptureJSON, wire.CaptureLines, wire.CaptureBoolean:
	default:
		v.addf(messages.JoinPath(p, "capture_format"), "unknown format %q (use %s)%s", st.CaptureFormat, strings.Join(wire.CaptureFormats, ", "), suggestion(st.CaptureFormat, wire.CaptureFormats))
	}
	if v.captured == nil {
		v.captured = map[string]bool{}
	}
	v.captured[st.Capture] = true
}

// when checks a step's condition: it parses, and its variables are
// captured by earlier steps or are the item's.
func (v *validator) when(p string, st *messages.Step) {
	if st.When == "" {
		return
	}
	wp := messages.JoinPath(p, "when")
	e, err := expr.ParseCondition(st.When)
	if err != nil {
		v.addf(wp, "%v", err)
		return
	}
	for _, path := range e.Paths() {
		name := path[0].Field
		switch {
		case name == wire.RefItem, name == wire.RefItemIndex, name == wire.RefItemTotal, name == wire.RefAttempt, v.captured[name]:
		case len(path) == 2 && (name == wire.RefShell || name == wire.RefLast) && path[1].Field == "output":
		default:
			v.addf(wp, "%s: no earlier step captures %q (a condition reads item.<field>, item_index, attempt, shell.output or a captured variable)", path, name)
			return
		}
	}
}

// variables checks that the captured variables a template reads are
// captured by earlier steps of its list.
func (v *validator) variables(p string, t wire.Template) {
	for _, part := range t.Parts {
		if part.Ref == nil || part.Default != nil || !wire.IsVarRef(part.Ref) || v.captured[part.Ref[0]] {
			continue // a reference with a default may name what is not there
		}
		if _, inEnv := v.env[part.Ref[0]]; inEnv && len(part.Ref) == 1 {
			continue // the job's env variable
		}
		v.addf(p, "${%s}: unknown reference %q: no earlier step captures it (use item, item.<field>, item_id, item_index, item_total, job_id, attempt, item_workdir, env.<NAME> or a bare name of the job's env, map.<field> in reduce, shell.output, or capture: on an earlier step)", strings.Join(part.Ref, "."), part.Ref[0])
		return
	}
}

// captureOutput rewrites Prodigy's capture_output: a name is capture: NAME;
// true and false name no variable (the step's output is ${shell.output}
// for the next step in any case).
func (rw *rewrite) captureOutput(p string, st map[string]any) {
	co, ok := st["capture_output"]
	if !ok {
		return
	}
	op := messages.JoinPath(p, "capture_output")
	wp := rw.written(op)
	switch v := co.(type) {
	case bool:
		delete(st, "capture_output")
		if v {
			rw.notef(wp, "true: the step's output is ${shell.output} for the next step (capture: NAME keeps it for all the steps after it)")
		}
	case string:
		if st["capture"] != nil {
			rw.addf(wp, "set once: capture_output: NAME or capture: NAME")
			return
		}
		delete(st, "capture_output")
		st["capture"] = v
		rw.steps = append(rw.steps, rename{from: messages.JoinPath(p, "capture"), to: op})
	default:
		rw.addf(wp, "expected true, false or a variable's name, got %v", co)
		delete(st, "capture_output")
	}
}

// allowFailure rewrites Prodigy's allow_failure: true as retry_config's
// on_failure: continue: when the step gives up, the item goes on with the
// next step.
func (rw *rewrite) allowFailure(p string, st map[string]any) {
	af, ok := st["allow_failure"]
	if !ok {
		return
	}
	delete(st, "allow_failure")
	ap := messages.JoinPath(p, "allow_failure")
	wp := rw.written(ap)
	b, isBool := af.(bool)
	switch {
	case !isBool:
		rw.addf(wp, "expected true or false, got %v", af)
		return
	case !b:
		return
	case st["on_failure"] != nil:
		rw.addf(wp, "set one of allow_failure and on_failure")
		return
	}
	rc, _ := st["retry_config"].(map[string]any)
	if st["retry_config"] != nil && rc == nil {
		return // the decoder reports retry_config
	}
	if rc == nil {
		rc = map[string]any{}
		st["retry_config"] = rc
	}
	if rc["on_failure"] != nil {
		rw.addf(wp, "set one of allow_failure and retry_config.on_failure")
		return
	}
	rc["on_failure"] = messages.OnFailureContinue
	rw.steps = append(rw.steps, rename{from: messages.JoinPath(p, "retry_config.on_failure"), to: ap})
	rw.notef(wp, "true: retry_config.on_failure: continue, the item goes on with the next step when this one gives up (it captures nothing then)")
}

// onSuccess rewrites Prodigy's on_success: {shell: X} as on_success: X.
func (rw *rewrite) onSuccess(p string, st map[string]any) {
	m, isObj := st["on_success"].(map[string]any)
	if !isObj {
		return // absent, or a command as jetfleet writes it (the decoder checks it)
	}
	wp := rw.written(messages.JoinPath(p, "on_success"))
	for _, k := range sortedKeys(m) {
		if k != "shell" {
			rw.addf(messages.JoinPath(wp, k), "not yet: a step's on_success is one command, {shell: \"...\"} (with nested on_success) or {claude: \"...\"}")
			delete(st, "on_success")
			return
		}
	}
	st["on_success"] = m["shell"]
	rw.steps = append(rw.steps, rename{from: messages.JoinPath(p, "on_success"), to: messages.JoinPath(p, "on_success.shell")})
}
