package prodigystep

// Document rewrites the top-level fields of a workflow that only
// Prodigy's examples use, in place, before the layout is read:
//
//   - steps: a list of steps in a document that has neither commands,
//     map nor agent_template is read as commands (a standard workflow),
//     with a warning: Prodigy's own loader reads commands, and some of
//     its examples write steps;
//   - description: a line about the workflow, removed with a warning
//     (jetfleet's jobs are labelled by name).
//
// Paths in the Result are the document's.
func Document(m map[string]any) *Result {
	r := &Result{}
	steps, isList := m["steps"].([]any)
	_, hasCommands := m["commands"]
	_, hasMap := m["map"]
	_, hasTemplate := m["agent_template"]
	if isList && len(steps) > 0 && !hasCommands && !hasMap && !hasTemplate && allSteps(steps) {
		delete(m, "steps")
		m["commands"] = steps
		r.Renames = append(r.Renames, Rename{From: "commands", To: "steps"})
		r.warnf("steps", "read as commands: a standard workflow's steps are its commands (Prodigy's loader reads commands only)")
	}
	if d, ok := m["description"].(string); ok && (isList || hasCommands || hasMap) {
		delete(m, "description")
		r.warnf("description", "has no effect: a job is labelled by its name (name:); the description %q is not kept", d)
	}
	return r
}

// allSteps reports whether every element of list is an object with a
// command of its own (shell or claude), as a step of a workflow is.
func allSteps(list []any) bool {
	for _, v := range list {
		st, ok := v.(map[string]any)
		if !ok {
			return false
		}
		_, shell := st["shell"]
		_, claude := st["claude"]
		if !shell && !claude {
			return false
		}
	}
	return true
}
