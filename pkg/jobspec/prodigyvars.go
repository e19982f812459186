package jobspec

import (
	"regexp"
	"strings"
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
	for _, k := range []string{"shell", "claude"} {
		s, ok := st[k].(string)
		if !ok || !mapResultsRef.MatchString(s) {
			continue
		}
		st[k] = mapResultsRef.ReplaceAllString(s, "${1}$${${2}map.results_json${3}")
		rw.notef(rw.written(p+"."+k), "${map.results} is the map results' JSON, as Prodigy gives it (${map.results_json}, at most 100 KiB pasted into the command; ${map.results_file} is the file's path)")
	}
}
