package jobspec

import (
	"strings"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/internal/writefile"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// writeFile checks a write_file step (internal/writefile): its path stays
// in the item's directory as written, content without references is
// valid in its format already, and the fields of other kinds are absent.
func (v *validator) writeFile(p string, st *messages.Step, reduce bool) {
	wp, w := messages.JoinPath(p, "write_file"), st.WriteFile
	if st.Shell != "" || st.Claude != "" || st.Handler != "" {
		v.addf(wp, "set only one of shell, handler, claude or write_file")
	}
	for field, set := range map[string]bool{"capture": st.Capture != "", "working_dir": st.WorkingDir != "", "with": len(st.With) > 0} {
		if set {
			v.addf(messages.JoinPath(p, field), "not with write_file (it has no output, and its path is relative to the item's directory)")
		}
	}
	pp, cp := messages.JoinPath(wp, "path"), messages.JoinPath(wp, "content")
	if err := writefile.CheckPath(w.Path); err != nil {
		v.addf(pp, "%v", err)
	} else {
		v.template(pp, w.Path, reduce)
	}
	v.template(cp, w.Content, reduce)
	if err := writefile.CheckFormat(w.Format); err != nil {
		v.addf(messages.JoinPath(wp, "format"), "%v%s", err, suggestion(w.Format, writefile.Formats))
	} else if t, err := wire.ParseTemplate(w.Content); err == nil && len(t.Parts) <= 1 && (len(t.Parts) == 0 || t.Parts[0].Ref == nil) {
		if _, err := writefile.Render(w.Format, w.Content); err != nil {
			v.addf(cp, "%v", err) // literal content: refused now, not on every item
		}
	}
	if _, err := writefile.ParseMode(strings.TrimSpace(w.Mode)); err != nil {
		v.addf(messages.JoinPath(wp, "mode"), "%v", err)
	}
}
