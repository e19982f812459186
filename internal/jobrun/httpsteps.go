package jobrun

import (
	"fmt"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// httpHandler is the agents' built-in http handler (pkg/agent.HTTPHandlerName).
const httpHandler = "http"

// httpTargetProblems refuses, at submission, the http steps whose URL
// writes out a host the agents would refuse to reach (wire.HTTPHostRefusal
// under Config.HTTPAllow): a loopback or link-local address such as the
// cloud metadata service's. A host given by name is resolved, and
// checked, by the agent when the step runs.
func (c *Coordinator) httpTargetProblems(spec *messages.JobSpec) []messages.FieldError {
	allow, _ := wire.ParseHTTPAllow(c.cfg.HTTPAllow) // checked by Config.Validate
	var out []messages.FieldError
	check := func(p string, st *messages.Step) {
		if st == nil || st.Handler != httpHandler {
			return
		}
		raw, _ := st.With["url"].(string)
		t, err := wire.ParseTemplate(raw)
		if err != nil {
			return // refused by the spec's validation
		}
		u, err := wire.URLOrigin(t)
		if err != nil {
			return
		}
		if why := wire.HTTPHostRefusal(u.Hostname(), allow); why != "" {
			out = append(out, messages.FieldError{Field: messages.JoinPath(messages.JoinPath(p, "with"), "url"),
				Message: fmt.Sprintf("the host %s %s", u.Hostname(), why)})
		}
	}
	if spec.Setup != nil {
		for i := range spec.Setup.Commands {
			check(messages.IndexPath("setup.commands", i), &spec.Setup.Commands[i])
		}
	}
	for i := range spec.AgentTemplate {
		check(messages.IndexPath("agent_template", i), &spec.AgentTemplate[i])
	}
	for i := range spec.Reduce {
		check(messages.IndexPath("reduce", i), &spec.Reduce[i])
	}
	if ep := spec.ErrorPolicy; ep != nil && ep.OnItemFailure != nil {
		check("error_policy.on_item_failure.custom", ep.OnItemFailure.Custom)
	}
	return out
}
