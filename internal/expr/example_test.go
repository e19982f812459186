package expr_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jetfleet/jetfleet/internal/expr"
)

func Example() {
	e, err := expr.Parse("severity in ['high', 'critical'] && is_number(score) && score >= 5")
	if err != nil {
		panic(err)
	}
	for _, s := range []string{`{"severity": "high", "score": 7}`, `{"severity": "low", "score": 9}`, `{"severity": "critical"}`} {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var item any
		if err := d.Decode(&item); err != nil {
			panic(err)
		}
		fmt.Println(s, e.Eval(expr.JSON(item)))
	}
	// Output:
	// {"severity": "high", "score": 7} true
	// {"severity": "low", "score": 9} false
	// {"severity": "critical"} false
}
