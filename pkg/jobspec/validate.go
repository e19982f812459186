package jobspec

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/expr"
	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/stepkind"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Validate checks the values of a spec built in code: tokens, required
// fields, ranges, templates, regexes, and duplicate inline item ids. It
// reports every problem at once in a *messages.ValidationError with each
// field's path. The parsers check all this too, and the shell commands'
// references (which Validate leaves to them).
func Validate(s *messages.JobSpec) error {
	v := &validator{}
	v.jobSpec(s)
	if len(v.problems) == 0 {
		return nil
	}
	return &messages.ValidationError{Problems: v.problems}
}

// ValidateRetryConfig checks a standalone retry config as a step's
// retry_config is checked; problem paths are relative to it
// ("backoff.exponential.base").
func ValidateRetryConfig(rc *messages.RetryConfig) error {
	v := &validator{}
	if rc == nil {
		return nil
	}
	v.retryConfig("", rc, false)
	if len(v.problems) == 0 {
		return nil
	}
	return &messages.ValidationError{Kind: messages.KindRetryConfig, Problems: v.problems}
}

// validator collects validation problems. bad and given come from the
// decoder (nil when validating a spec built in code): problems at or under a
// path that failed to decode are dropped, since the decode problem already
// says what is wrong there.
type validator struct {
	problems []messages.FieldError
	// warnings are settings accepted as they are but probably not meant
	// so (an initial_delay above max_delay, capped): see Warnings.
	warnings []messages.FieldError
	bad      map[string]bool
	given    map[string]bool
	// captured are the variables the earlier steps of the step list being
	// checked capture (capture.go), after those of the setup for map and
	// reduce steps; nil before its first step.
	captured map[string]bool
	// env is the job's env: a bare ${NAME} of it is its value (capture.go).
	env map[string]string
}

func (v *validator) warnf(path, format string, args ...any) {
	v.warnings = append(v.warnings, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) addf(path, format string, args ...any) {
	for b := range v.bad {
		if under(path, b) {
			return
		}
	}
	v.problems = append(v.problems, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
}

// isBad reports whether path or something under it failed to decode: the
// field was given, even though its value is unusable.
func (v *validator) isBad(path string) bool {
	for b := range v.bad {
		if under(b, path) {
			return true
		}
	}
	return false
}

func (v *validator) isGiven(path string) bool { return v.given[path] }

func (v *validator) jobSpec(s *messages.JobSpec) {
	if s == nil {
		v.addf("", "no job spec")
		return
	}
	v.env = envNames(s) // env, env_values and secrets: a bare ${NAME} reads them
	if s.ID != "" {
		if err := messages.ValidToken(s.ID); err != nil {
			v.addf("id", "%v", err)
		}
	}
	if s.Pool != "" {
		if err := messages.ValidPool(s.Pool); err != nil {
			v.addf("pool", "%v", err)
		}
	}
	if s.Team != "" {
		if err := messages.ValidToken(s.Team); err != nil {
			v.addf("team", "%v", err)
		}
	}
	if s.NotBefore != "" {
		if _, err := wire.NotBeforeTime(s.NotBefore, time.Time{}); err != nil {
			v.addf("not_before", "%v", err)
		}
	}
	if p := s.Priority; p != nil && (*p < messages.MinPriority || *p > messages.MaxPriority) {
		v.addf("priority", "must be %d to %d (default %d), got %d", messages.MinPriority, messages.MaxPriority, messages.DefaultPriority, *p)
	}
	if s.GroupBy != "" {
		v.groupBy("group_by", s.GroupBy)
	}
	hasItems := len(s.Items) > 0 || v.isBad("items")
	hasInput := s.Input != "" || v.isBad("input")
	hasCommand := s.InputCommand != "" || v.isBad("input_command")
	switch {
	case hasCommand && (hasItems || hasInput):
		v.addf("input_command", "set one of items, input and input_command")
	case hasCommand:
		if strings.TrimSpace(s.InputCommand) == "" {
			v.addf("input_command", "must not be empty")
		}
		hasInput = true // json_path applies to its output
	case hasItems && hasInput:
		v.addf("input", "set either items or input, not both")
	case !hasItems && !hasInput:
		if v.isGiven("items") {
			v.addf("items", "must not be empty (or set input to read the items from a file)")
		} else {
			v.addf("items", "required: set items (inline) or input (a file of items)")
		}
	}
	if len(s.Input) > messages.MaxInputRefBytes {
		v.addf("input", "is %d bytes long, the limit is %d", len(s.Input), messages.MaxInputRefBytes)
	}
	if s.InputDigest != "" {
		if !hasInput {
			v.addf("input_digest", "only allowed with input")
		} else if err := messages.ValidDigest(s.InputDigest); err != nil {
			v.addf("input_digest", "%v", err)
		}
	}
	if s.JSONPath != "" {
		if !hasInput {
			v.addf("json_path", "only allowed with input")
		} else if !strings.HasPrefix(s.JSONPath, "$") {
			v.addf("json_path", `must start with "$", e.g. "$.items[*]"`)
		} else if len(s.JSONPath) > messages.MaxJSONPathBytes {
			v.addf("json_path", "is %d bytes long, the limit is %d", len(s.JSONPath), messages.MaxJSONPathBytes)
		}
	}
	if s.MaxParallel < 0 {
		v.addf("max_parallel", "must be >= 0 (0 = no cap), got %d", s.MaxParallel)
	}
	v.selection(s)
	var setupCaptured map[string]bool
	if st := s.Setup; st != nil {
		if len(st.Commands) == 0 && !v.isBad("setup.commands") {
			v.addf("setup.commands", "required: at least one step")
		}
		v.captured = nil
		for i := range st.Commands {
			v.step(messages.IndexPath("setup.commands", i), &st.Commands[i], false)
		}
		// What the setup captures, every map and reduce item starts with.
		setupCaptured = v.captured
		if st.Timeout < 0 {
			v.addf("setup.timeout", "must not be negative, got %s", st.Timeout)
		}
	}
	if len(s.AgentTemplate) == 0 && !v.isBad("agent_template") {
		v.addf("agent_template", "required: at least one step")
	}
	v.captured = maps.Clone(setupCaptured)
	for i := range s.AgentTemplate {
		v.step(messages.IndexPath("agent_template", i), &s.AgentTemplate[i], false)
	}
	switch {
	case s.AgentTimeout < 0:
		v.addf("agent_timeout", "must not be negative, got %s", s.AgentTimeout)
	case s.AgentTimeout == 0 && v.isGiven("agent_timeout"):
		v.addf("agent_timeout", "must be greater than 0 (omit it for no bound)")
	}
	if s.ErrorPolicy != nil {
		v.errorPolicy("error_policy", s.ErrorPolicy)
		v.thresholdsReached(s)
	}
	if s.RetryBudget != nil {
		v.budget("retry_budget", s.RetryBudget)
	}
	if s.RetryBudgetPerItem != nil {
		v.budget("retry_budget_per_item", s.RetryBudgetPerItem)
	}
	if s.BestEffort != nil {
		v.bestEffort("best_effort", s.BestEffort)
	}
	v.captured = maps.Clone(setupCaptured)
	for i := range s.Reduce {
		v.step(messages.IndexPath("reduce", i), &s.Reduce[i], true)
	}
	v.environment(s) // env, env_values, secrets, env_files, profiles, steps' env (jobspec.go)
	v.items(s)
}

func (v *validator) items(s *messages.JobSpec) {
	seen := make(map[string]int, len(s.Items))
	for i, raw := range s.Items {
		p := messages.IndexPath("items", i)
		if !json.Valid(raw) {
			v.addf(p, "not valid JSON")
			continue
		}
		id := messages.ItemIdentity(raw, s.IDField, int64(i))
		if id == "" {
			idField := s.IDField
			if idField == "" {
				idField = messages.DefaultIDField
			}
			v.addf(messages.JoinPath(p, idField), "item id must not be empty")
			continue
		}
		if j, dup := seen[id]; dup {
			v.addf(p, "duplicate item id %q (same as items[%d])", id, j)
			continue
		}
		seen[id] = i
	}
}

func (v *validator) step(p string, st *messages.Step, reduce bool) {
	shellP, handlerP := messages.JoinPath(p, "shell"), messages.JoinPath(p, "handler")
	hasShell := st.Shell != "" || v.isBad(shellP)
	hasHandler := st.Handler != "" || v.isBad(handlerP)
	if st.WriteFile != nil || st.Foreach != nil {
		if st.WriteFile != nil {
			v.writeFile(p, st, reduce)
		}
		v.stepRest(p, st, reduce)
		return
	}
	if claudeP := messages.JoinPath(p, "claude"); st.Claude != "" || v.isGiven(claudeP) || v.isBad(claudeP) {
		switch {
		case hasShell || hasHandler:
			v.addf(claudeP, "set only one of shell, handler or claude")
		case strings.TrimSpace(st.Claude) == "" && !v.isBad(claudeP):
			v.addf(claudeP, "must not be empty")
		default:
			v.template(claudeP, st.Claude, reduce)
		}
		v.stepRest(p, st, reduce)
		return
	}
	if st.Shell != "" && strings.TrimSpace(st.Shell) == "" || st.Shell == "" && v.isGiven(shellP) {
		v.addf(shellP, "must not be empty")
		hasShell = true
	}
	if st.Handler != "" && strings.TrimSpace(st.Handler) == "" || st.Handler == "" && v.isGiven(handlerP) {
		v.addf(handlerP, "must not be empty")
		hasHandler = true
	}
	switch {
	case hasShell && hasHandler:
		v.addf(p, "set only one of shell or handler")
	case !hasShell && !hasHandler:
		v.addf(p, "needs one of shell (a command) or handler (a registered Go handler)")
	}
	if strings.TrimSpace(st.Shell) != "" {
		v.template(shellP, st.Shell, reduce)
	}
	v.stepRest(p, st, reduce)
}

// stepRest checks the fields every kind of step has.
func (v *validator) stepRest(p string, st *messages.Step, reduce bool) {
	v.when(p, st)
	v.kinds(p, st, reduce)
	defer v.capture(p, st) // after the step's own fallback: it sees only earlier captures
	if st.OnSuccess != "" {
		v.template(messages.JoinPath(p, "on_success"), st.OnSuccess, reduce)
	}
	if st.CommitRequired {
		v.warnf(messages.JoinPath(p, "commit_required"), "is checked only where the step runs in a git checkout: each item's directory starts empty (an earlier step clones into it, or working_dir names a checkout); elsewhere it has no effect")
	}
	if st.WorkingDir != "" && strings.TrimSpace(st.WorkingDir) == "" {
		v.addf(messages.JoinPath(p, "working_dir"), "must not be blank (omit it for the item's directory)")
	}
	if st.Handler == httpHandler {
		v.httpURL(messages.JoinPath(messages.JoinPath(p, "with"), "url"), st.With["url"])
	}
	if len(st.With) > 0 && st.Handler == "" && st.Shell != "" {
		v.addf(messages.JoinPath(p, "with"), "only allowed with handler (shell steps use ${item.<field>} references)")
	}
	if st.Timeout < 0 {
		v.addf(messages.JoinPath(p, "timeout"), "must not be negative, got %s", st.Timeout)
	}
	if st.RetryConfig != nil {
		v.retryConfig(messages.JoinPath(p, "retry_config"), st.RetryConfig, reduce)
	}
	if lp := messages.JoinPath(p, "limit"); st.Limit != nil && !v.isBad(lp) {
		v.limit(lp, st.Limit)
	}
}

// kinds checks a step's foreach and exit-code handlers (internal/stepkind),
// each nested step as a step; ${index} and ${total} are known in a body.
func (v *validator) kinds(p string, st *messages.Step, reduce bool) {
	for _, e := range stepkind.Check(st) {
		v.addf(messages.JoinPath(p, e.Field), "%s", e.Message)
	}
	for _, code := range slices.Sorted(maps.Keys(st.OnExitCode)) {
		h := st.OnExitCode[code]
		v.step(messages.JoinPath(p, "on_exit_code."+code), &h, reduce)
	}
	if fe := st.Foreach; fe != nil {
		if fe.Command != "" {
			v.template(messages.JoinPath(p, "foreach.command"), fe.Command, reduce)
		}
		outer := v.captured
		v.captured = map[string]bool{"index": true, "total": true}
		maps.Copy(v.captured, outer)
		for i := range fe.Do {
			v.step(messages.IndexPath(messages.JoinPath(p, "foreach.do"), i), &fe.Do[i], reduce)
		}
		v.captured = outer
	}
}

// httpHandler is the built-in http handler's name (pkg/agent.HTTPHandlerName).
const httpHandler = "http"

// httpURL checks an http step's url at submission: a template whose
// values cannot change the scheme, host or port, of an http or https URL
// (file:// and the like are refused here, not when the step runs).
func (v *validator) httpURL(p string, u any) {
	s, ok := u.(string)
	if !ok {
		return // the agent reports a missing or mistyped url with the step
	}
	t, err := wire.ParseTemplate(s)
	if err != nil {
		v.addf(p, "%v", err)
		return
	}
	if _, err := wire.URLOrigin(t); err != nil {
		v.addf(p, "%s", strings.TrimPrefix(err.Error(), wire.ErrURLTemplate.Error()+": "))
	}
}

func (v *validator) template(p, s string, allowMap bool) {
	t, err := wire.ParseTemplate(s)
	if err != nil {
		v.addf(p, "%v", err)
		return
	}
	if !allowMap && t.UsesMap() {
		v.addf(p, "${map.*} references are only allowed in reduce steps")
	}
	v.variables(p, t)
}

// groupBy checks a group_by template: items are grouped when the job is
// expanded, so only ${item...} and ${item_id} are known then.
func (v *validator) groupBy(p, s string) {
	t, err := wire.ParseTemplate(s)
	if err != nil {
		v.addf(p, "%v", err)
		return
	}
	for _, part := range t.Parts {
		if part.Ref != nil && part.Ref[0] != wire.RefItem && part.Ref[0] != wire.RefItemID {
			v.addf(p, "${%s} is not known when items are grouped (use ${item.<field>} or ${item_id})", strings.Join(part.Ref, "."))
			return
		}
	}
}

func (v *validator) retryConfig(p string, rc *messages.RetryConfig, reduce bool) {
	v.retryBounds(p, "attempts", rc.Attempts, rc.Backoff, rc.InitialDelay, rc.MaxDelay, rc.JitterFactor)
	switch rc.JitterMode {
	case "", messages.JitterProportional, messages.JitterFull, messages.JitterEqual, messages.JitterDecorrelated:
	default:
		modes := []string{string(messages.JitterProportional), string(messages.JitterFull), string(messages.JitterEqual), string(messages.JitterDecorrelated)}
		v.addf(messages.JoinPath(p, "jitter_mode"), "unknown jitter mode %q (use proportional, full, equal or decorrelated)%s", rc.JitterMode, suggestion(string(rc.JitterMode), modes))
	}
	for i, m := range rc.RetryOn {
		v.matcher(messages.IndexPath(messages.JoinPath(p, "retry_on"), i), m)
	}
	if rc.RetryBudget != nil && *rc.RetryBudget <= 0 {
		v.addf(messages.JoinPath(p, "retry_budget"), "must be greater than 0 (omit it for no budget), got %s", *rc.RetryBudget)
	}
	if cb := rc.CircuitBreaker; cb != nil {
		bp := messages.JoinPath(p, "circuit_breaker")
		if reduce {
			v.addf(bp, "only applies to agent_template steps (the reduce step runs once)")
		} else {
			v.breaker(bp, cb)
		}
	}
	if rc.OnFailure != nil {
		v.onFailure(messages.JoinPath(p, "on_failure"), rc.OnFailure, reduce)
	}
	v.noEffect(p, rc.Attempts, "attempts", rc.Jitter, "backoff", "initial_delay", "max_delay", "jitter", "jitter_factor", "jitter_mode", "retry_on", "retry_budget")
}

// noEffect warns about the retry fields under p that are given but have no
// effect: every delay setting when attempts (attemptsField) is 1, which
// never retries, and jitter_factor and jitter_mode without jitter: true.
func (v *validator) noEffect(p string, attempts *int, attemptsField string, jitter bool, delayFields ...string) {
	if attempts != nil && *attempts == 1 {
		for _, f := range delayFields {
			if fp := messages.JoinPath(p, f); v.isGiven(fp) {
				v.warnf(fp, "has no effect: %s: 1 never retries", attemptsField)
			}
		}
		return
	}
	for _, f := range []string{"jitter_factor", "jitter_mode"} {
		if fp := messages.JoinPath(p, f); !jitter && v.isGiven(fp) {
			v.warnf(fp, "has no effect without jitter: true")
		}
	}
}

// retryBounds checks what a step's retry_config and the error policy's
// share: the number of attempts (attemptsField), the backoff, the delays
// and the jitter factor.
func (v *validator) retryBounds(p, attemptsField string, attempts *int, b *messages.Backoff, initialDelay, maxDelay *messages.Duration, jitterFactor *float64) {
	if attempts != nil && (*attempts < 1 || *attempts > messages.MaxAttempts) {
		v.addf(messages.JoinPath(p, attemptsField), "must be between 1 and %d, got %d", messages.MaxAttempts, *attempts)
	}
	if b != nil {
		v.backoff(messages.JoinPath(p, "backoff"), b)
	}
	v.delayBounds(p, initialDelay, maxDelay, b)
	if f := jitterFactor; f != nil && !(*f >= 0 && *f <= 1) {
		v.addf(messages.JoinPath(p, "jitter_factor"), "must be between 0 and 1, got %s", fmtFloat(*f))
	}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// delayBounds checks the durations of a retry config, and warns when the
// effective initial delay exceeds the effective max_delay: every strategy
// caps its delays at max_delay (docs/contract.md §4), so such a config is
// valid, but every delay is max_delay.
func (v *validator) delayBounds(p string, initialDelay, maxDelay *messages.Duration, b *messages.Backoff) {
	initP, maxP := messages.JoinPath(p, "initial_delay"), messages.JoinPath(p, "max_delay")
	if initialDelay != nil && *initialDelay < 0 {
		v.addf(initP, "must not be negative, got %s", *initialDelay)
		return
	}
	if maxDelay != nil && *maxDelay < 0 {
		v.addf(maxP, "must not be negative, got %s", *maxDelay)
		return
	}
	initV, initDefault := messages.DefaultInitialDelay, true
	if initialDelay != nil {
		initV, initDefault = *initialDelay, false
	}
	if b != nil && b.Initial != nil && b.Kind.Known() {
		initV, initDefault = *b.Initial, false
		initP = messages.JoinPath(p, "backoff."+string(b.Kind)+".initial")
		if b.Kind == messages.BackoffFixed {
			initP = messages.JoinPath(p, "backoff.fixed.delay")
		}
	}
	maxV, maxDefault := messages.DefaultMaxDelay, true
	if maxDelay != nil {
		maxV, maxDefault = *maxDelay, false
	}
	if initV <= maxV || v.isBad(initP) || v.isBad(maxP) || v.initialBad(messages.JoinPath(p, "backoff")) {
		return
	}
	if b != nil && b.Kind == messages.BackoffCustom {
		return // its delays are absolute: initial_delay plays no part
	}
	if initDefault {
		v.warnf(maxP, "%s is less than initial_delay %s (default): every delay is capped at %s", maxV, initV, maxV)
		return
	}
	def := ""
	if maxDefault {
		def = " (default)"
	}
	v.warnf(initP, "%s is greater than max_delay %s%s: every delay is capped at %s", initV, maxV, def, maxV)
}

// initialBad reports whether a backoff at p failed to decode in a way that
// may have lost its initial delay.
func (v *validator) initialBad(p string) bool {
	if v.bad[p] {
		return true
	}
	for b := range v.bad {
		if !under(b, p) {
			continue
		}
		rest := strings.Split(strings.TrimPrefix(b, p+"."), ".")
		if len(rest) == 1 || rest[1] == "initial" || rest[1] == "delay" {
			return true
		}
	}
	return false
}

func (v *validator) backoff(p string, b *messages.Backoff) {
	if !b.Kind.Known() {
		v.addf(p, "unknown backoff strategy %q (use fixed, linear, exponential, fibonacci or custom)", b.Kind)
		return
	}
	kp := messages.JoinPath(p, string(b.Kind))
	if b.Base != 0 {
		if b.Kind != messages.BackoffExponential {
			v.addf(kp, "base only applies to exponential backoff")
		} else if math.IsInf(b.Base, 0) || !(b.Base >= 1) {
			v.addf(messages.JoinPath(kp, "base"), "must be a finite number >= 1, got %s", fmtFloat(b.Base))
		}
	}
	if b.Increment != nil {
		if b.Kind != messages.BackoffLinear {
			v.addf(kp, "increment only applies to linear backoff")
		} else if *b.Increment < 0 {
			v.addf(messages.JoinPath(kp, "increment"), "must not be negative, got %s", *b.Increment)
		}
	}
	if len(b.Delays) > 0 && b.Kind != messages.BackoffCustom {
		v.addf(kp, "delays only apply to custom backoff")
	}
	for i, d := range b.Delays {
		if d < 0 {
			v.addf(messages.IndexPath(messages.JoinPath(kp, "delays"), i), "must not be negative, got %s", d)
		}
	}
	if b.Initial != nil {
		if b.Kind == messages.BackoffCustom {
			v.addf(kp, "initial does not apply to custom backoff (its delays are absolute)")
		} else if *b.Initial < 0 {
			v.addf(messages.JoinPath(kp, "initial"), "must not be negative, got %s", *b.Initial)
		}
	}
}

func (v *validator) matcher(p string, m messages.Matcher) {
	set := 0
	for _, ok := range []bool{m.Builtin != "", m.Pattern != "", len(m.ExitCodes) > 0} {
		if ok {
			set++
		}
	}
	switch {
	case set == 0:
		v.addf(p, "empty matcher (use %s)", matcherForms)
		return
	case set > 1:
		v.addf(p, "set only one of a built-in name, pattern or exit_code")
		return
	}
	if m.Builtin != "" && !isBuiltinMatcher(strings.ToLower(m.Builtin)) {
		v.addf(p, "unknown matcher %q (use %s)", m.Builtin, matcherForms)
	}
	if m.Pattern != "" {
		if _, err := regexp.Compile(m.Pattern); err != nil {
			v.addf(messages.JoinPath(p, "pattern"), "invalid regex: %s", regexProblem(m.Pattern, err))
		}
	}
	for j, c := range m.ExitCodes {
		if c < 0 || c > 255 {
			v.addf(messages.IndexPath(messages.JoinPath(p, "exit_code"), j), "must be between 0 and 255, got %d", c)
		}
	}
}

// regexProblem turns a regexp compile error into "missing closing )" or
// "invalid escape sequence: `\q`".
func regexProblem(pattern string, err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		msg := se.Code.String()
		if se.Expr != "" && se.Expr != pattern {
			msg += ": `" + se.Expr + "`"
		}
		return msg
	}
	return err.Error()
}

func (v *validator) onFailure(p string, f *messages.OnFailure, reduce bool) {
	switch f.Action {
	case messages.OnFailureStop, messages.OnFailureContinue:
		if f.Fallback != "" {
			v.addf(p, "a fallback command only applies to the fallback action")
		}
	case messages.OnFailureFallback:
		cp := messages.JoinPath(p, "fallback.command")
		if f.Claude {
			cp = messages.JoinPath(p, "fallback.claude")
		}
		for i := range f.Steps {
			v.step(messages.IndexPath(messages.JoinPath(p, "fallback.steps"), i), &f.Steps[i], reduce)
		}
		if strings.TrimSpace(f.Fallback) == "" && len(f.Steps) == 0 {
			v.addf(cp, "required: the command to run when the step gives up")
		} else if f.Fallback != "" {
			v.template(cp, f.Fallback, reduce)
		}
	default:
		v.addf(p, `unknown action %q (use stop, continue or {fallback: {command: "..."}})`, f.Action)
	}
}

func (v *validator) errorPolicy(p string, ep *messages.ErrorPolicy) {
	if a := ep.OnItemFailure; a != nil {
		ap := messages.JoinPath(p, "on_item_failure")
		switch a.Action {
		case messages.ItemFailureDLQ, messages.ItemFailureRetry, messages.ItemFailureSkip, messages.ItemFailureStop:
			if a.Custom != nil {
				v.addf(ap, "a step only applies to the custom action")
			}
		case messages.ItemFailureCustom:
			if a.Custom == nil {
				v.addf(ap, "custom needs a step: %s", customStepForm)
			} else {
				v.captured = nil
				v.step(messages.JoinPath(ap, "custom"), a.Custom, false)
			}
		default:
			v.addf(ap, "unknown action %q (use dlq, retry, skip, stop or %s)", a.Action, customStepForm)
		}
	}
	if ep.MaxFailures != nil && *ep.MaxFailures < 1 {
		v.addf(messages.JoinPath(p, "max_failures"), "must be >= 1, got %d", *ep.MaxFailures)
	}
	if f := ep.FailureThreshold; f != nil && !(*f > 0 && *f <= 1) {
		v.addf(messages.JoinPath(p, "failure_threshold"), "must be greater than 0 and at most 1 (a failure rate), got %s", fmtFloat(*f))
	}
	if c := ep.ErrorCollection; c != nil {
		cp := messages.JoinPath(p, "error_collection")
		switch c.Mode {
		case messages.CollectAggregate, messages.CollectImmediate:
			if c.BatchSize != 0 {
				v.addf(cp, "a batch size only applies to batched")
			}
		case messages.CollectBatched:
			if c.BatchSize < 1 {
				v.addf(messages.JoinPath(cp, "batched.size"), "must be >= 1, got %d", c.BatchSize)
			}
		default:
			v.addf(cp, "unknown mode %q (use aggregate, immediate or {batched: {size: N}})", c.Mode)
		}
	}
	if cb := ep.CircuitBreaker; cb != nil {
		v.breaker(messages.JoinPath(p, "circuit_breaker"), cb)
	}
	if rc := ep.RetryConfig; rc != nil {
		rp := messages.JoinPath(p, "retry_config")
		v.retryBounds(rp, "max_attempts", rc.MaxAttempts, rc.Backoff, rc.InitialDelay, rc.MaxDelay, rc.JitterFactor)
		if a := ep.OnItemFailure; a != nil && !retry.RetriesItems(a.Action) {
			v.warnf(rp, "has no effect with on_item_failure: %s (failed items are run again under dlq and retry only)", a.Action)
		} else {
			v.noEffect(rp, rc.MaxAttempts, "max_attempts", rc.Jitter, "backoff", "initial_delay", "max_delay", "jitter", "jitter_factor")
		}
	}
	if ep.ContinueOnFailure != nil && !*ep.ContinueOnFailure {
		for _, f := range []string{"max_failures", "failure_threshold"} {
			if fp := messages.JoinPath(p, f); v.isGiven(fp) {
				v.warnf(fp, "has no effect with continue_on_failure: false (the first failed item stops the job)")
			}
		}
	}
}

// thresholdsReached warns about the failure thresholds a job of inline
// items can never reach: failure_threshold applies from
// retry.MinFinishedForThreshold finished items on, max_failures at that
// many failed ones.
func (v *validator) thresholdsReached(s *messages.JobSpec) {
	n, ep := len(s.Items), s.ErrorPolicy
	if n == 0 || ep.ContinueOnFailure != nil && !*ep.ContinueOnFailure {
		return // read from a file: not counted here; or the first failure stops the job (warned above)
	}
	if ep.FailureThreshold != nil && n < retry.MinFinishedForThreshold && v.isGiven("error_policy.failure_threshold") {
		v.warnf("error_policy.failure_threshold", "has no effect: it applies from %d finished items on, and the job has %d", retry.MinFinishedForThreshold, n)
	}
	if ep.MaxFailures != nil && *ep.MaxFailures > n && v.isGiven("error_policy.max_failures") {
		v.warnf("error_policy.max_failures", "has no effect: the job has %d items, fewer than %d", n, *ep.MaxFailures)
	}
}

// breaker checks a circuit_breaker (the job's or a step's): thresholds and
// half_open_requests >= 1 and timeout > 0 when given.
func (v *validator) breaker(bp string, cb *messages.CircuitBreakerConfig) {
	for _, f := range []struct {
		name string
		val  int
	}{{"failure_threshold", cb.FailureThreshold}, {"success_threshold", cb.SuccessThreshold}, {"half_open_requests", cb.HalfOpenRequests}} {
		fp := messages.JoinPath(bp, f.name)
		if f.val < 0 || f.val == 0 && v.isGiven(fp) {
			v.addf(fp, "must be >= 1, got %d", f.val)
		}
	}
	tp := messages.JoinPath(bp, "timeout")
	if cb.Timeout < 0 || cb.Timeout == 0 && v.isGiven(tp) {
		v.addf(tp, "must be greater than 0, got %s", cb.Timeout)
	}
}

func (v *validator) budget(p string, b *messages.BudgetValue) {
	switch {
	case b.IsPercent && b.Count != 0:
		v.addf(p, "set a count or a percentage, not both")
	case b.IsPercent && !(b.Percent >= 0 && b.Percent <= 100):
		v.addf(p, "percentage must be between 0%% and 100%%, got %s%%", fmtFloat(b.Percent))
	case !b.IsPercent && b.Percent != 0:
		v.addf(p, "Percent is set but IsPercent is false")
	case !b.IsPercent && b.Count < 0:
		v.addf(p, "must be >= 0 (0 = no retries), got %d", b.Count)
	}
}

func (v *validator) bestEffort(p string, be *messages.BestEffort) {
	if be.MinGroups < 0 {
		v.addf(messages.JoinPath(p, "min_groups"), "must be >= 0, got %d", be.MinGroups)
	}
	switch dp := messages.JoinPath(p, "deadline"); {
	case be.Deadline < 0:
		v.addf(dp, "must not be negative, got %s", be.Deadline)
	case be.Deadline == 0 && v.isGiven(dp):
		v.addf(dp, "must be greater than 0 (omit it for the operator's default, 5m out of the box)")
	}
	switch be.LateResults {
	case "", messages.LateResultsLog, messages.LateResultsUpdate, messages.LateResultsLogOnly, messages.LateResultsUpdateResult:
	default:
		v.addf(messages.JoinPath(p, "late_results"), "unknown policy %q (use log or update; AD-44's log_only and update_result are accepted too)%s",
			be.LateResults, suggestion(be.LateResults, []string{messages.LateResultsLog, messages.LateResultsUpdate, messages.LateResultsLogOnly, messages.LateResultsUpdateResult}))
	}
}

// selection checks the item selection fields: filter, sort_by and distinct
// parse, offset and max_items are in range.
func (v *validator) selection(s *messages.JobSpec) {
	if s.Filter != "" {
		if _, err := expr.Parse(s.Filter); err != nil {
			v.addf("filter", "%v", err)
		}
	}
	if s.SortBy != "" {
		if _, err := expr.ParseSortBy(s.SortBy); err != nil {
			v.addf("sort_by", "%v", err)
		}
	}
	if s.Distinct != "" {
		if _, err := expr.ParsePath(s.Distinct); err != nil {
			v.addf("distinct", "a field path such as id or location.file: %v", err)
		}
	}
	if s.Offset < 0 {
		v.addf("offset", "must be >= 0, got %d", s.Offset)
	}
	if s.MaxItems != nil && *s.MaxItems < 1 {
		v.addf("max_items", "must be >= 1 (omit it for every item), got %d", *s.MaxItems)
	}
}
