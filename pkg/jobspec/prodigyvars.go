package jobspec

import (
	"regexp"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// mapResultsRef finds ${map.results} as a whole value (with a default or a
// filter after it), not $${map.results}, a literal.
var mapResultsRef = regexp.MustCompile(`(^|[^$])\$\{(\s*)map\.results(\s*[}|:])`)

// prodigyMapResults rewrites a reduce step of Prodigy's layout: there
// ${map.results} is the map results' JSON, jetfleet's ${map.results_json};
// in jetfleet's layout it is the path of the file holding them.
func (rw *rewrite) prodigyMapResults(p string, st map[string]any) {
	if !rw.prodigy || !strings.HasPrefix(p, "reduce") {
		return
	}
	w, _ := st["write_file"].(map[string]any) // its content too: Prodigy's reduce writes the JSON to a file
	for _, k := range []string{"shell", "claude", "write_file.content"} {
		m, key := st, k
		if wk, isW := strings.CutPrefix(k, "write_file."); isW {
			m, key = w, wk
		}
		s, ok := m[key].(string)
		if !ok || !mapResultsRef.MatchString(s) {
			continue
		}
		m[key] = mapResultsRef.ReplaceAllString(s, "${1}$${${2}map.results_json${3}")
		rw.notef(rw.written(p+"."+k), "${map.results} is the map results' JSON, as Prodigy gives it (${map.results_json}, at most 100 KiB pasted into the command; ${map.results_file} is the file's path)")
	}
}

// stepID reads a step's id (Prodigy's step identification): its output is
// ${ID.output} and its exit code ${ID.exit_code} for the steps after it,
// a capture named ID with the exit_code and success streams.
func (rw *rewrite) stepID(p string, st map[string]any) {
	id, ok := st["id"]
	if !ok {
		return
	}
	delete(st, "id")
	ip := messages.JoinPath(p, "id")
	wp := rw.written(ip)
	name, isStr := id.(string)
	switch c, has := st["capture"]; {
	case !isStr:
		rw.addf(wp, "expected a string, the step's name (${NAME.output}), got %v", id)
		return
	case has && c != name:
		rw.addf(wp, "a step's id names its output (${%s.output}), a capture of that name: set one of id and capture, or the same name", name)
		return
	}
	st["capture"] = name
	if st["capture_streams"] == nil {
		st["capture_streams"] = map[string]any{"exit_code": true, "success": true}
	}
	rw.steps = append(rw.steps, rename{from: messages.JoinPath(p, "capture"), to: ip})
	rw.notef(wp, "the step's output is ${%s.output} and its exit code ${%s.exit_code} for the steps after it (a capture named %s)", name, name, name)
}
