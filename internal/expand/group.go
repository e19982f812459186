package expand

import (
	"encoding/json"
	"strings"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// grouper evaluates a spec's group_by for each item. A nil *grouper puts
// every item in the default group "".
type grouper struct {
	raw  string
	tmpl wire.Template
}

func newGrouper(groupBy string) (*grouper, error) {
	if groupBy == "" {
		return nil, nil
	}
	t, err := wire.ParseTemplate(groupBy)
	if err != nil {
		return nil, wrapf(ErrSpec, err, "group_by %q", groupBy)
	}
	for _, p := range t.Parts {
		if p.Ref == nil {
			continue
		}
		switch p.Ref[0] {
		case wire.RefItem, wire.RefItemID:
		default:
			return nil, errorf(ErrSpec, "group_by %q: ${%s} is not known when items are grouped (use ${item.<field>} or ${item_id})",
				groupBy, strings.Join(p.Ref, "."))
		}
	}
	return &grouper{raw: groupBy, tmpl: t}, nil
}

// group returns the item's group: the template's literal parts and the
// referenced values concatenated as they are (a group is a name, nothing is
// quoted). A missing field or an empty result is an error.
func (g *grouper) group(raw json.RawMessage, id string) (string, error) {
	if g == nil {
		return "", nil
	}
	var b strings.Builder
	for _, p := range g.tmpl.Parts {
		switch {
		case p.Ref == nil:
			b.WriteString(p.Literal)
		case p.Ref[0] == wire.RefItemID:
			b.WriteString(id)
		default:
			v, err := wire.LookupItemField(raw, p.Ref[1:])
			if err != nil {
				return "", wrapf(ErrGroup, err, "item %q: group_by %q", id, g.raw)
			}
			b.WriteString(v)
		}
	}
	if b.Len() == 0 {
		return "", errorf(ErrGroup, "item %q: group_by %q is empty for this item", id, g.raw)
	}
	return b.String(), nil
}
