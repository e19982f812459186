package jobspec

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/jetfleet/jetfleet/internal/jsonnode"
	"github.com/jetfleet/jetfleet/internal/prodigystep"
	"github.com/jetfleet/jetfleet/internal/suggest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The other layouts a job may be written in (docs/job-spec.md, "Prodigy's
// layout"), rewritten into jetfleet's own before the spec is decoded, on
// the document's tree:
//
//   - Prodigy's workflow layout: `mode: mapreduce` with a `map:` block
//     (input, json_path, agent_template, max_parallel, error_policy, ...)
//     whose fields move to the top level; `mode: standard` with
//     `commands:`, run in order as one implicit item; a step's own
//     `on_failure:` holding a command, the step's fallback. Prodigy's
//     `claude:` steps are refused: nothing in jetfleet can run them.
//   - AD-44's submission fields: `retry_budget_per_workflow`,
//     `best_effort: true|false`, `best_effort_min_dcs`,
//     `best_effort_deadline_seconds`, with AD-44's meaning of 0 ("use the
//     default").
//
// Problems keep the paths as written ("map.agent_template[0].claude"): the
// rewrite records, for each field it moved, the path it was written at,
// and problems found on the rewritten tree are renamed back. Each rewrite
// leaves a note saying what the field means in jetfleet's terms
// (`fleetctl validate --explain`).

// Modes of Prodigy's layout.
const (
	ModeMapReduce = "mapreduce"
	ModeStandard  = "standard"
)

// StandardItemID is the id of the one item a standard-mode job
// (`commands:`) runs.
const StandardItemID = "standard"

// mapFields are the fields a `map:` block may hold, as jetfleet names them.
var mapFields = []string{"input", "json_path", "id_field", "agent_template", "max_parallel", "agent_timeout", "error_policy", "items", "group_by",
	"filter", "sort_by", "distinct", "offset", "max_items", "input_command"}

// rename maps a path of the rewritten tree (from, and everything under it)
// to the path it was written at (to).
type rename struct{ from, to string }

// rewrite is what the layout rewrite did to a document.
type rewrite struct {
	// steps and blocks are renames: a step's fields first, then the
	// blocks that moved (a path may go through one of each).
	steps, blocks []rename
	// bad are paths of the rewritten tree whose problems are already
	// reported (a claude step): validation does not report them again.
	bad []string
	// notes say what each rewritten field means, at the path it was
	// written at.
	notes []messages.FieldError
	// warnings are fields accepted with no effect, as written.
	warnings []messages.FieldError
	// problems are the rewrite's own, as written.
	problems []messages.FieldError
	// prodigy is set for a document in Prodigy's layout (mode, map or
	// commands): its commands without a retry_config run once.
	prodigy bool
}

// written returns the path p of the rewritten tree as it was written.
func (rw *rewrite) written(p string) string {
	if rw == nil {
		return p
	}
	for _, list := range [][]rename{rw.steps, rw.blocks} {
		for _, r := range list {
			if under(p, r.from) {
				p = r.to + p[len(r.from):]
				break
			}
		}
	}
	return p
}

// renamed returns problems with their paths as written.
func (rw *rewrite) renamed(problems []messages.FieldError) []messages.FieldError {
	for i := range problems {
		problems[i].Field = rw.written(problems[i].Field)
	}
	return problems
}

func (rw *rewrite) addf(path, format string, args ...any) {
	rw.problems = append(rw.problems, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

func (rw *rewrite) notef(path, format string, args ...any) {
	rw.notes = append(rw.notes, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

func (rw *rewrite) warnf(path, format string, args ...any) {
	rw.warnings = append(rw.warnings, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

// rewriteLayout rewrites the document's tree in place into jetfleet's
// layout and returns what it did.
func rewriteLayout(t *tree) *rewrite {
	rw := &rewrite{}
	bare := false
	if list, ok := t.value.([]any); ok && len(list) > 0 && allObjects(list) {
		// A standard workflow written as its list of commands.
		t.value, bare = map[string]any{"commands": list}, true
	}
	m, ok := t.value.(map[string]any)
	if !ok {
		return rw
	}
	doc, written := prodigystep.Document(m), "commands"
	if rw.warnings = append(rw.warnings, doc.Warnings...); len(doc.Renames) > 0 {
		written = doc.Renames[0].To
	}
	mode := rw.mode(m)
	_, hasMap := m["map"]
	_, hasCommands := m["commands"]
	switch {
	case mode == ModeMapReduce && hasCommands:
		rw.addf("commands", "only in mode: standard (a mapreduce job's steps are map.agent_template)")
		delete(m, "commands")
		hasCommands = false
	case mode == ModeStandard && hasMap:
		rw.addf("map", "only in mode: mapreduce (a standard job's steps are commands)")
		delete(m, "map")
		hasMap = false
	case hasMap && hasCommands:
		rw.addf("commands", "set map (mode: mapreduce) or commands (mode: standard), not both")
		delete(m, "commands")
		hasCommands = false
	}
	if hasMap {
		rw.hoistMap(m)
	}
	if hasCommands && bare {
		written = ""
	}
	if hasCommands {
		rw.standard(m, written)
	}
	rw.prodigy = mode != "" || hasMap || hasCommands
	if _, ok := m["merge"]; ok && rw.prodigy {
		delete(m, "merge")
		rw.warnf("merge", "has no effect: jetfleet has no worktree to merge back; these steps do not run (run them as reduce steps, or after the job)")
	}
	if _, ok := m["setup"]; ok {
		rw.setup(m)
	}
	for _, list := range []string{"agent_template", "reduce", "setup.commands"} {
		var steps []any
		if list == "setup.commands" {
			sm, _ := m["setup"].(map[string]any)
			steps, _ = sm["commands"].([]any)
		} else {
			rw.unwrapCommands(m, list)
			steps, _ = m[list].([]any)
		}
		for i, st := range steps {
			if sm, ok := st.(map[string]any); ok {
				rw.step(messages.IndexPath(list, i), sm)
			}
		}
	}
	rw.ad44(m)
	return rw
}

// mode reads and removes `mode`.
func (rw *rewrite) mode(m map[string]any) string {
	v, ok := m["mode"]
	if !ok {
		return ""
	}
	delete(m, "mode")
	s, isStr := v.(string)
	switch {
	case !isStr:
		rw.addf("mode", "expected mapreduce or standard, got %s", jsonnode.Describe(v))
	case s == ModeMapReduce:
		rw.notef("mode", "mapreduce: the job runs agent_template once per item (map.agent_template), then reduce once")
		return s
	case s == ModeStandard:
		rw.notef("mode", "standard: the job runs its commands in order as one item")
		return s
	default:
		rw.addf("mode", "unknown mode %q (use mapreduce or standard)%s", s, suggestion(s, []string{ModeMapReduce, ModeStandard}))
	}
	return ""
}

// hoistMap moves the fields of a `map:` block to the top level.
func (rw *rewrite) hoistMap(m map[string]any) {
	v := m["map"]
	delete(m, "map")
	mm, ok := v.(map[string]any)
	if !ok {
		rw.addf("map", "expected an object (input, json_path, agent_template, max_parallel, ...), got %s", jsonnode.Describe(v))
		return
	}
	for _, k := range sortedKeys(mm) {
		p := messages.JoinPath("map", k)
		to := k
		val := mm[k]
		if k == "agent_timeout_secs" {
			n, isNum := val.(json.Number)
			f, err := jsonnode.AsFloat(n)
			if !isNum || err != nil || f <= 0 || f > math.MaxInt64/1e9 {
				rw.addf(p, "expected a number of seconds greater than 0, got %s", jsonnode.Describe(val))
				continue
			}
			to, val = "agent_timeout", secondsValue(f)
			rw.notef(p, "is agent_timeout: %s", messages.Duration(f*1e9))
		}
		if k == "timeout_config" {
			rw.timeoutConfig(m, mm, p, val)
			continue
		}
		if k == "input" && isInputCommand(val) {
			to = "input_command"
			rw.notef(p, "is a command (it names no file): input_command, whose output (JSON through json_path, else one item per line) is the items as Prodigy reads them")
		}
		switch {
		case !slices.Contains(mapFields, to):
			rw.addf(p, "unknown field in map (it takes %s)%s", strings.Join(mapFields, ", "), suggestion(k, mapFields))
			if s := suggest.Closest(k, mapFields); s != "" && mm[s] == nil {
				rw.bad = append(rw.bad, s) // misspelt: given, not missing
			}
			continue
		}
		if _, dup := m[to]; dup {
			rw.addf(p, "%s is set at the top level too: set it once", to)
			continue
		}
		m[to] = val
		rw.blocks = append(rw.blocks, rename{from: to, to: p})
	}
	if m["items"] == nil && m["input"] == nil && m["input_command"] == nil {
		rw.blocks = append(rw.blocks, rename{from: "items", to: "map.input"})
	}
	rw.notef("map", "its fields are the job's own (map.input is input, map.agent_template is agent_template, ...)")
}

// standard turns `commands:` into agent_template and one implicit item.
// written is where the document has them ("" for a bare list).
func (rw *rewrite) standard(m map[string]any, written string) {
	v := m["commands"]
	delete(m, "commands")
	if _, dup := m["agent_template"]; dup {
		rw.addf("commands", "set commands (mode: standard) or agent_template, not both")
		return
	}
	m["agent_template"] = v
	if written == "" {
		rw.notef("", "a list of commands is a standard workflow (mode: standard, commands: the list)")
	}
	rw.blocks = append(rw.blocks, rename{from: "agent_template", to: written})
	if m["items"] == nil && m["input"] == nil {
		m["items"] = []any{json.RawMessage(`{"id":"` + StandardItemID + `"}`)}
		rw.notef(written, "are agent_template, run in order as one item (id %q): a step gives up under its retry_config, on_failure: continue goes on with the next command, and a failed item goes to the DLQ (error_policy.on_item_failure)", StandardItemID)
		return
	}
	rw.notef(written, "are agent_template")
}

// unwrapCommands accepts Prodigy's older `agent_template: {commands: [...]}`
// and `reduce: {commands: [...]}` forms.
func (rw *rewrite) unwrapCommands(m map[string]any, list string) {
	obj, ok := m[list].(map[string]any)
	if !ok || len(obj) != 1 || obj["commands"] == nil {
		return
	}
	m[list] = obj["commands"]
	written := rw.written(list)
	rw.steps = append(rw.steps, rename{from: list, to: written + ".commands"})
	rw.notef(written+".commands", "are %s", list)
}

// step rewrites one step of Prodigy's layout: without a retry_config it
// runs once, as Prodigy runs it; an integer timeout is seconds; and a
// step's own on_failure holding a command becomes its fallback.
func (rw *rewrite) step(p string, st map[string]any) {
	rw.prodigyStep(p, st)
	if _, has := st["retry_config"]; !has && !rw.prodigy && !strings.HasPrefix(p, "setup") {
		rw.notef(rw.written(p), "has no retry_config: jetfleet's default applies, %d attempts with exponential backoff from %s to %s (a command in Prodigy's layout runs once)", messages.DefaultAttempts, messages.DefaultInitialDelay, messages.DefaultMaxDelay)
	}
	if rw.prodigy {
		if _, has := st["retry_config"]; !has {
			st["retry_config"] = map[string]any{"attempts": json.Number("1")}
			rw.notef(rw.written(p), "has no retry_config: it runs once, as Prodigy runs a command without one (a step in jetfleet's layout gets 3 attempts); a failed item is then handled by error_policy")
		}
		if n, isNum := st["timeout"].(json.Number); isNum {
			tp := rw.written(messages.JoinPath(p, "timeout"))
			if f, err := jsonnode.AsFloat(n); err != nil || f <= 0 || f > math.MaxInt64/1e9 {
				rw.addf(tp, "expected a number of seconds greater than 0, got %s", n)
				rw.bad = append(rw.bad, messages.JoinPath(p, "timeout"))
				delete(st, "timeout")
			} else {
				st["timeout"] = secondsValue(f)
				rw.notef(tp, "%s seconds: timeout %s", n, messages.Duration(f*1e9))
			}
		}
	}
	rw.stepID(p, st)
	rw.captureOutput(p, st)
	rw.allowFailure(p, st)
	rw.onSuccess(p, st)
	rw.prodigyMapResults(p, st)
	rw.stepOnFailure(p, st)
}

// prodigyStep applies internal/prodigystep to a step, then reads a
// foreach step's body as steps of their own.
func (rw *rewrite) prodigyStep(p string, st map[string]any) {
	r, wp := prodigystep.Rewrite(st, rw.prodigy), rw.written(p)
	for _, n := range r.Renames {
		rw.steps = append(rw.steps, rename{from: messages.JoinPath(p, n.From), to: messages.JoinPath(wp, n.To)})
	}
	rw.merge(wp, r)
	fe, _ := st["foreach"].(map[string]any)
	body, _ := fe["do"].([]any)
	for i, b := range body {
		if bm, ok := b.(map[string]any); ok {
			rw.step(messages.IndexPath(messages.JoinPath(p, "foreach.do"), i), bm)
		}
	}
}

// merge adds what internal/prodigystep found at wp (its paths relative to wp).
func (rw *rewrite) merge(wp string, r *prodigystep.Result) {
	for _, l := range []struct {
		to   *[]messages.FieldError
		from []messages.FieldError
	}{{&rw.notes, r.Notes}, {&rw.warnings, r.Warnings}, {&rw.problems, r.Problems}} {
		for _, f := range l.from {
			*l.to = append(*l.to, messages.FieldError{Field: messages.JoinPath(wp, f.Field), Message: f.Message})
		}
	}
}

// ad44 rewrites AD-44's submission fields.
func (rw *rewrite) ad44(m map[string]any) {
	if v, ok := m["retry_budget_per_workflow"]; ok {
		delete(m, "retry_budget_per_workflow")
		switch {
		case m["retry_budget_per_item"] != nil:
			rw.addf("retry_budget_per_workflow", "is AD-44's name of retry_budget_per_item: set one of them")
		case isZero(v):
			rw.notef("retry_budget_per_workflow", "0: the operator's per-item default, as AD-44 says (retry_budget_per_item: 0 would allow no retries)")
		default:
			m["retry_budget_per_item"] = v
			rw.blocks = append(rw.blocks, rename{from: "retry_budget_per_item", to: "retry_budget_per_workflow"})
			rw.notef("retry_budget_per_workflow", "is retry_budget_per_item (AD-44 calls an item a workflow)")
		}
	}
	be, isBool := m["best_effort"].(bool)
	if isBool {
		if be {
			m["best_effort"] = map[string]any{}
			rw.notef("best_effort", "true: best-effort completion over the job's groups (best_effort: {})")
		} else {
			delete(m, "best_effort")
			rw.notef("best_effort", "false: no best-effort completion (as if unset)")
		}
	}
	block, isBlock := m["best_effort"].(map[string]any)
	flat := func(name, field, value string, set func(v any) (any, bool)) {
		v, ok := m[name]
		if !ok {
			return
		}
		delete(m, name)
		switch {
		case isBool && be:
			val, ok := set(v)
			if !ok {
				return
			}
			if val != nil {
				block[field] = val
				rw.blocks = append(rw.blocks, rename{from: "best_effort." + field, to: name})
			}
			rw.notef(name, "is best_effort.%s%s", field, value)
		case isBlock:
			rw.addf(name, "is AD-44's name of best_effort.%s: with a best_effort block, set %s there", field, field)
		default:
			if _, ok := set(v); ok {
				rw.warnf(name, "has no effect: best_effort is not true")
			}
		}
	}
	flat("best_effort_min_dcs", "min_groups", " (AD-44's datacenters are jetfleet's groups, group_by)", func(v any) (any, bool) {
		return v, true // decoded and checked as min_groups
	})
	flat("best_effort_deadline_seconds", "deadline", "", func(v any) (any, bool) {
		n, isNum := v.(json.Number)
		f, err := jsonnode.AsFloat(n)
		if !isNum || err != nil || f < 0 || f > math.MaxInt64/1e9 {
			rw.addf("best_effort_deadline_seconds", "expected a number of seconds >= 0 (0 = the operator's default), got %s", jsonnode.Describe(v))
			return nil, false
		}
		if f == 0 {
			rw.notef("best_effort_deadline_seconds", "0: the operator's default deadline (5m out of the box), as AD-44 says")
			return nil, true
		}
		return secondsValue(f), true
	})
}

// secondsValue is f seconds as a {secs, nanos} duration of the tree.
func secondsValue(f float64) any {
	secs := math.Floor(f)
	nanos := math.Round((f - secs) * 1e9)
	if nanos >= 1e9 {
		secs, nanos = secs+1, 0
	}
	return map[string]any{"secs": json.Number(fmt.Sprintf("%.0f", secs)), "nanos": json.Number(fmt.Sprintf("%.0f", nanos))}
}

func isZero(v any) bool {
	n, ok := v.(json.Number)
	if !ok {
		return false
	}
	f, err := jsonnode.AsFloat(n)
	return err == nil && f == 0
}

// inputCommandChars are the characters that make map.input a command: a
// file name (items.json, objstore://fleet_uploads/x) has none of them.
const inputCommandChars = " \t\n|;&<>$`'\"(){}*?"

// isInputCommand reports whether Prodigy's map.input is a command rather
// than a file: Prodigy runs it when no file of that name exists; jetfleet
// decides by its text, before anything runs.
func isInputCommand(v any) bool {
	s, ok := v.(string)
	return ok && strings.ContainsAny(strings.TrimSpace(s), inputCommandChars)
}

// setup reads Prodigy's setup phase: a list of steps, or the block form
// {commands, timeout (seconds), capture_outputs}.
func (rw *rewrite) setup(m map[string]any) {
	switch v := m["setup"].(type) {
	case []any:
		m["setup"] = map[string]any{"commands": v}
		rw.blocks = append(rw.blocks, rename{from: "setup.commands", to: "setup"})
	case map[string]any:
		if n, isNum := v["timeout"].(json.Number); isNum {
			f, err := jsonnode.AsFloat(n)
			if err != nil || f <= 0 || f > math.MaxInt64/1e9 {
				rw.addf("setup.timeout", "expected a number of seconds greater than 0, got %s", n)
				rw.bad = append(rw.bad, "setup.timeout")
				delete(v, "timeout")
			} else {
				v["timeout"] = secondsValue(f)
				rw.notef("setup.timeout", "%s seconds: the setup phase's bound, %s", n, messages.Duration(f*1e9))
			}
		}
		if v["capture_outputs"] != nil {
			rw.captureOutputs(v)
		}
	default:
		return // the decoder reports the type
	}
	rw.notef("setup", "is the job's setup phase, setup.commands (with Prodigy, run once before the map phase; a file it leaves at map.input is the input)")
}

// captureOutputs reads Prodigy's setup.capture_outputs, a map of variable
// name to the index of the setup command whose output it captures (NAME: 0,
// or NAME: {command_index: 0}): each becomes capture: NAME on that
// command, which the map and reduce steps then read as the setup's
// capture. A command captures into one variable.
func (rw *rewrite) captureOutputs(setup map[string]any) {
	const p = "setup.capture_outputs"
	co, ok := setup["capture_outputs"].(map[string]any)
	if !ok {
		rw.addf(p, "expected an object of variable name to command index, got %s", jsonnode.Describe(setup["capture_outputs"]))
		rw.bad = append(rw.bad, p)
		return
	}
	delete(setup, "capture_outputs")
	cmds, _ := setup["commands"].([]any)
	for _, name := range slices.Sorted(maps.Keys(co)) {
		np := messages.JoinPath(p, name)
		val := co[name]
		if obj, isObj := val.(map[string]any); isObj {
			val = obj["command_index"]
			for k := range obj {
				if k != "command_index" {
					rw.warnf(messages.JoinPath(np, k), "has no effect: the variable is the command's stdout, as capture: NAME reads it")
				}
			}
		}
		n, isNum := val.(json.Number)
		i, err := n.Int64()
		if !isNum || err != nil || i < 0 || i >= int64(len(cmds)) {
			rw.addf(np, "expected the index of a setup command (0 to %d), got %s", len(cmds)-1, jsonnode.Describe(val))
			continue
		}
		cmd, isObj := cmds[i].(map[string]any)
		if !isObj {
			continue // the decoder reports the command
		}
		if c, has := cmd["capture"]; has && c != name {
			rw.addf(np, "command %d already captures %s: a command captures into one variable", i, jsonnode.Describe(c))
			continue
		}
		if c, has := cmd["capture_output"].(string); has && c != name {
			rw.addf(np, "command %d already captures %q: a command captures into one variable", i, c)
			continue
		}
		cmd["capture"] = name
		rw.notef(np, "is capture: %s on setup command %d: the map and reduce steps read ${%s}", name, i, name)
	}
}

// timeoutConfig reads Prodigy's map.timeout_config (p its path, val its
// value): agent_timeout_secs is the job's agent_timeout (with
// timeout_policy per_agent, the default, or hybrid) or each step's timeout
// (per_command); command_timeouts set the timeouts of the steps that have
// none (claude: and shell: for every step of the kind, claude_0 for the
// first claude step).
func (rw *rewrite) timeoutConfig(m, mm map[string]any, p string, val any) {
	tc, ok := val.(map[string]any)
	if !ok {
		rw.addf(p, "expected an object (agent_timeout_secs, timeout_policy, command_timeouts, timeout_action, ...), got %s", jsonnode.Describe(val))
		return
	}
	seconds := func(k string, v any) (any, bool) {
		n, isNum := v.(json.Number)
		f, err := jsonnode.AsFloat(n)
		if !isNum || err != nil || f <= 0 || f > math.MaxInt64/1e9 {
			rw.addf(messages.JoinPath(p, k), "expected a number of seconds greater than 0, got %s", jsonnode.Describe(v))
			return nil, false
		}
		return secondsValue(f), true
	}
	policy, _ := tc["timeout_policy"].(string)
	switch policy {
	case "", "per_agent", "hybrid", "per_command":
	default:
		rw.addf(messages.JoinPath(p, "timeout_policy"), "unknown policy %s (use per_agent, per_command or hybrid)", jsonnode.Describe(tc["timeout_policy"]))
		return
	}
	var steps []any
	switch at := m["agent_template"].(type) {
	case []any:
		steps = at
	case map[string]any:
		steps, _ = at["commands"].([]any)
	}
	setStep := func(st map[string]any, d any) {
		if _, has := st["timeout"]; !has {
			st["timeout"] = d
		}
	}
	// command_timeouts first: a step's own timeout wins over per_command's.
	keys := sortedKeys(tc)
	slices.SortStableFunc(keys, func(a, b string) int {
		return cmp.Compare(boolInt(a != "command_timeouts"), boolInt(b != "command_timeouts"))
	})
	for _, k := range keys {
		kp := messages.JoinPath(p, k)
		v := tc[k]
		switch k {
		case "agent_timeout_secs":
			d, ok := seconds(k, v)
			if !ok {
				continue
			}
			if policy == "per_command" {
				for _, st := range steps {
					if sm, ok := st.(map[string]any); ok {
						setStep(sm, d)
					}
				}
				rw.notef(kp, "with timeout_policy: per_command: each map step without a timeout gets %s seconds", v)
				continue
			}
			if _, dup := m["agent_timeout"]; dup || mm["agent_timeout_secs"] != nil {
				rw.addf(kp, "the agent timeout is set in map too: set it once")
				continue
			}
			m["agent_timeout"] = d
			rw.blocks = append(rw.blocks, rename{from: "agent_timeout", to: kp})
			rw.notef(kp, "is agent_timeout: %s seconds for each item's run through its steps", v)
		case "timeout_policy":
			rw.notef(kp, "%s", map[string]string{
				"per_agent":   "per_agent: agent_timeout_secs bounds an item's run (agent_timeout)",
				"hybrid":      "hybrid: agent_timeout_secs bounds an item's run (agent_timeout), command_timeouts its steps",
				"per_command": "per_command: agent_timeout_secs bounds each step",
			}[policy])
		case "command_timeouts":
			ct, ok := v.(map[string]any)
			if !ok {
				rw.addf(kp, "expected an object of seconds by command kind (claude, shell, claude_0, ...), got %s", jsonnode.Describe(v))
				continue
			}
			// Specific keys (claude_0) first, then the kind's.
			keys := sortedKeys(ct)
			slices.SortStableFunc(keys, func(a, b string) int { return strings.Count(b, "_") - strings.Count(a, "_") })
			for _, ck := range keys {
				d, ok := seconds(messages.JoinPath("command_timeouts", ck), ct[ck])
				if !ok {
					continue
				}
				kind, nth, hasN := strings.Cut(ck, "_")
				if kind != "claude" && kind != "shell" {
					rw.addf(messages.JoinPath(kp, ck), "unknown command kind (use claude, shell, claude_N or shell_N)")
					continue
				}
				n := -1
				if hasN {
					var err error
					if n, err = parseIndex(nth); err != nil {
						rw.addf(messages.JoinPath(kp, ck), "unknown command kind (use claude, shell, claude_N or shell_N)")
						continue
					}
				}
				seen := 0
				for _, st := range steps {
					sm, ok := st.(map[string]any)
					if !ok || sm[kind] == nil {
						continue
					}
					if n < 0 || seen == n {
						setStep(sm, d)
					}
					seen++
				}
			}
			rw.notef(kp, "set the timeouts of the map steps that have none")
		case "timeout_action":
			switch v {
			case "dlq":
				rw.notef(kp, "dlq: a timed-out item fails (reason agent_timeout) and goes to the DLQ, as jetfleet does")
			case "skip", "fail", "graceful_terminate":
				rw.warnf(kp, "%s has no effect: a timed-out item fails (reason agent_timeout) and error_policy.on_item_failure decides what follows", v)
			default:
				rw.addf(kp, "unknown action %s (use dlq, skip, fail or graceful_terminate)", jsonnode.Describe(v))
			}
		case "cleanup_grace_period_secs", "enable_monitoring":
			rw.warnf(kp, "has no effect: a timed-out step gets the agent's --kill-grace, and timeouts are always counted (metrics, events)")
		default:
			rw.addf(kp, "unknown field in timeout_config (it takes agent_timeout_secs, timeout_policy, command_timeouts, timeout_action, cleanup_grace_period_secs, enable_monitoring)")
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func parseIndex(s string) (int, error) {
	n := 0
	if s == "" || len(s) > 6 {
		return 0, fmt.Errorf("not an index")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("not an index")
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}

func allObjects(list []any) bool {
	for _, v := range list {
		if _, ok := v.(map[string]any); !ok {
			return false
		}
	}
	return true
}
