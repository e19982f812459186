package messages_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestRenderURL(t *testing.T) {
	tpl, err := messages.ParseTemplate("https://h/u/${item.a}?q=${item.a}&id=${item_id}")
	require.NoError(t, err)
	got, err := tpl.Render(messages.TemplateVars{Item: json.RawMessage(`{"a": "x y/&z"}`), ItemID: "i?1"}, messages.URLEscape)
	require.NoError(t, err)
	require.Equal(t, "https://h/u/x%20y%2F&z?q=x+y%2F%26z&id=i%3F1", got)
	tpl, _ = messages.ParseTemplate("${env.HOME}")
	_, err = tpl.Render(messages.TemplateVars{}, nil)
	require.Error(t, err)
}
