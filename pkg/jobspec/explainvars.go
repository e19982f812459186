package jobspec

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jetfleet/jetfleet/internal/specenv"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// variableNotes says, for each step of spec, the variables its commands
// and condition can read and where each comes from (fleetctl validate
// --explain).
func variableNotes(spec *messages.JobSpec, rw *rewrite) []messages.FieldError {
	var notes []messages.FieldError
	envNames := slices.Sorted(maps.Keys(specenv.Names(spec))) // env, computed values, secrets
	var setupCaptured []string
	list := func(field string, steps []messages.Step, reduce bool) []string {
		captured := slices.Clone(setupCaptured)
		for i := range steps {
			st := &steps[i]
			p := messages.IndexPath(field, i)
			var b strings.Builder
			b.WriteString("reads ${item} and ${item.<field>} (the item), ${item_id}, ${item_index}, ${item_total}, ${job_id}, ${attempt}, ${item_workdir} (the agent)")
			if len(envNames) > 0 {
				fmt.Fprintf(&b, "; the job's env: ${env.NAME} and ${NAME} for %s", strings.Join(envNames, ", "))
			}
			if i > 0 {
				b.WriteString("; ${shell.output} and ${last.output}: the previous step's output")
			}
			if len(captured) > 0 {
				fmt.Fprintf(&b, "; captured by earlier steps: %s", strings.Join(captured, ", "))
			}
			if reduce {
				b.WriteString("; the map phase: ${map.results} (the results' file in jetfleet's layout, their JSON in Prodigy's), ${map.results_json}, ${map.results_file}, ${map.successful}, ${map.failed}, ${map.total}, ${map.success_rate}")
			}
			if rc := st.RetryConfig; rc != nil && rc.OnFailure != nil && rc.OnFailure.Action == messages.OnFailureFallback {
				b.WriteString("; its fallback reads the same, ${shell.output} the failed run's output")
			}
			notes = append(notes, messages.FieldError{Field: rw.written(p), Message: b.String()})
			if st.Capture != "" && !wire.IsOutputCapture(st.Capture) {
				format := cmp.Or(st.CaptureFormat, wire.CaptureString)
				captured = append(captured, fmt.Sprintf("${%s} (%s, %s)", st.Capture, rw.written(p), format))
			}
		}
		return captured
	}
	if spec.Setup != nil {
		setupCaptured = list("setup.commands", spec.Setup.Commands, false)
	}
	list("agent_template", spec.AgentTemplate, false)
	list("reduce", spec.Reduce, true)
	return notes
}
