package shell_test

import (
	"encoding/json"
	"fmt"

	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

func ExampleExpand() {
	t, err := messages.ParseTemplate(`convert ${item.path} "out/${item.id}.png"`)
	if err != nil {
		panic(err)
	}
	item := json.RawMessage(`{"id": "a\"b", "path": "'; rm -rf / #"}`)
	script, err := shell.Expand(t, shell.Vars{Item: item})
	fmt.Println(script, err)

	_, err = shell.Expand(t, shell.Vars{Item: json.RawMessage(`{"id": 1}`)})
	fmt.Println(err)
	// Output:
	// convert ''\''; rm -rf / #' "out/a\"b.png" <nil>
	// ${item.path}: item has no field "path"
}

func ExampleQuote() {
	fmt.Println(shell.Quote("it's $(here)"))
	fmt.Println(shell.Quote(""))
	// Output:
	// 'it'\''s $(here)'
	// ''
}
