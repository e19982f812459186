package wire_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/wire"
)

func TestRenderURL(t *testing.T) {
	tpl, err := wire.ParseTemplate("https://h/u/${item.a}?q=${item.a}&id=${item_id}")
	require.NoError(t, err)
	got, err := tpl.Render(wire.TemplateVars{Item: json.RawMessage(`{"a": "x y/&z"}`), ItemID: "i?1"}, wire.URLEscape)
	require.NoError(t, err)
	require.Equal(t, "https://h/u/x%20y%2F&z?q=x+y%2F%26z&id=i%3F1", got)
	tpl, _ = wire.ParseTemplate("${env.HOME}")
	_, err = tpl.Render(wire.TemplateVars{}, nil)
	require.Error(t, err)
}
