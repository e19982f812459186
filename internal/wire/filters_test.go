package wire_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// Defaults and filters: Prodigy's ${x:-text}, and the |default:text and
// |length forms its examples write.
func TestParseTemplateFilters(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name, in string
		want     wire.TemplatePart
		wantErr  string
	}{
		{name: "shell-style default", in: "${env.CI:-local}", want: wire.TemplatePart{Ref: []string{"env", "CI"}, Default: str("local")}},
		{name: "empty default", in: "${x:-}", want: wire.TemplatePart{Ref: []string{"x"}, Default: str("")}},
		{name: "default filter", in: "${build.success|default:false}", want: wire.TemplatePart{Ref: []string{"build", "success"}, Default: str("false")}},
		{name: "default with a colon and a bar", in: "${b.exit_code|default:N/A: a|b}", want: wire.TemplatePart{Ref: []string{"b", "exit_code"}, Default: str("N/A: a|b")}},
		{name: "length", in: "${list|length}", want: wire.TemplatePart{Ref: []string{"list"}, Length: true}},
		{name: "length with a bound", in: "${summary|length:100}", want: wire.TemplatePart{Ref: []string{"summary"}, Length: true, LengthMax: 100}},
		{name: "length then default", in: "${s | length | default:0}", want: wire.TemplatePart{Ref: []string{"s"}, Length: true, Default: str("0")}},
		{name: "map results path", in: "${map.results[0].output}", want: wire.TemplatePart{Ref: []string{"map", "results_json", "0", "output"}}},
		{name: "item_total", in: "${item_total}", want: wire.TemplatePart{Ref: []string{"item_total"}}},
		{name: "unknown filter", in: "${x|upper}", wantErr: `unknown filter "upper" (use |default:text or |length)`},
		{name: "length bound not a number", in: "${x|length:many}", wantErr: "the bound is a number of at least 1"},
		{name: "default without its text", in: "${x|default}", wantErr: "the default filter takes its text"},
		{name: "item_total takes no field", in: "${item_total.x}", wantErr: "item_total takes no field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tpl, err := wire.ParseTemplate(tt.in)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Len(t, tpl.Parts, 1)
			require.Equal(t, tt.want, tpl.Parts[0])
		})
	}
}

func TestTemplatePartApply(t *testing.T) {
	str := func(s string) *string { return &s }
	missing := errors.New("missing")
	tests := []struct {
		name    string
		part    wire.TemplatePart
		val     string
		err     error
		want    string
		wantErr bool
	}{
		{name: "value", part: wire.TemplatePart{Default: str("d")}, val: "v", want: "v"},
		{name: "default for a missing value", part: wire.TemplatePart{Default: str("d")}, err: missing, want: "d"},
		{name: "no default", part: wire.TemplatePart{}, err: missing, wantErr: true},
		{name: "length of text in characters", part: wire.TemplatePart{Length: true}, val: "héllo", want: "5"},
		{name: "length of an array", part: wire.TemplatePart{Length: true}, val: `[1,2,3]`, want: "3"},
		{name: "length of an object", part: wire.TemplatePart{Length: true}, val: `{"a":1}`, want: "1"},
		{name: "length capped", part: wire.TemplatePart{Length: true, LengthMax: 3}, val: "abcdef", want: "3"},
		{name: "length of the default", part: wire.TemplatePart{Length: true, Default: str("ab")}, err: missing, want: "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.part.Apply(tt.val, tt.err)
			if tt.wantErr {
				require.ErrorIs(t, err, missing)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	require.Equal(t, "${a.b|length:3|default:x}", wire.TemplatePart{Ref: []string{"a", "b"}, Length: true, LengthMax: 3, Default: str("x")}.Text())
}

// ${NAME.output} is the value of a step's capture (Prodigy's step id),
// unless the value is an object, whose output field it is then.
func TestCaptureLookupOutput(t *testing.T) {
	c := &wire.Capture{Value: []byte(`"it works"`)}
	got, err := c.Lookup([]string{"output"})
	require.NoError(t, err)
	require.Equal(t, "it works", got)
	c = &wire.Capture{Value: []byte(`{"output":"field"}`)}
	got, err = c.Lookup([]string{"output"})
	require.NoError(t, err)
	require.Equal(t, "field", got)
}
