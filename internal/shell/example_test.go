package shell_test

import (
	"encoding/json"
	"fmt"

	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/internal/wire"
)

func ExampleExpand() {
	t, err := wire.ParseTemplate(`convert ${item.path} "out/${item.id}.png"`)
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

// Compile once, expand for every item; a position where bash would
// evaluate the value is refused with a safe alternative.
func ExampleCompile() {
	t, _ := wire.ParseTemplate(`echo $(( ${attempt} * 2 )) ${item.n}`)
	s, err := shell.Compile(t)
	if err != nil {
		panic(err)
	}
	script, _ := s.Expand(shell.Vars{Attempt: 2, Item: json.RawMessage(`{"n": "a[$(id)]"}`)})
	fmt.Println(script)

	t, _ = wire.ParseTemplate(`[[ ${item.n} -gt 5 ]] && echo big`)
	_, err = shell.Compile(t)
	fmt.Println(err)
	// Output:
	// echo $(( 2 * 2 )) 'a[$(id)]'
	// ${item.n}: cannot be quoted safely: bash evaluates it as arithmetic in [[ ... -gt ... ]], which runs any $(...) in a value such as a[$(cmd)] whatever the quoting; check that it is a number and use the checked copy: n=$(printf '%s\n' ${item.n} | grep -xE -- '-?[0-9]+') || exit 1
}

func ExampleQuote() {
	fmt.Println(shell.Quote("it's $(here)"))
	fmt.Println(shell.Quote(""))
	// Output:
	// 'it'\''s $(here)'
	// ''
}
