// Command genitems writes a job input file of n items for expansion and
// memory tests:
//
//	go run ./scripts/genitems -n 1000000 -o items.json
//
// writes {"items":[{"id":"item-0000001","path":"images/item-0000001.jpg","region":"eu"},...]},
// one item per line, regions cycling through eu, us and ap. Use it with
// json_path "$.items[*]" and group_by "${item.region}".
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/jetfleet/jetfleet/internal/expand/expandtest"
)

func main() {
	n := flag.Int("n", 1_000_000, "number of items")
	out := flag.String("o", "-", "output file (- for stdout)")
	flag.Parse()
	if *n < 0 {
		fmt.Fprintln(os.Stderr, "genitems: -n must not be negative")
		os.Exit(2)
	}
	if err := run(*n, *out); err != nil {
		fmt.Fprintln(os.Stderr, "genitems:", err)
		os.Exit(1)
	}
}

func run(n int, out string) error {
	if out == "-" {
		return expandtest.WriteItems(os.Stdout, n)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := expandtest.WriteItems(f, n); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
