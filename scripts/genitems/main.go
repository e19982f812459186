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
	"bufio"
	"flag"
	"fmt"
	"os"
)

var regions = []string{"eu", "us", "ap"}

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
		bw := bufio.NewWriterSize(os.Stdout, 1<<16)
		if err := write(bw, n); err != nil {
			return err
		}
		return bw.Flush()
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<16)
	if err := write(bw, n); err != nil {
		f.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// write writes the document; bufio.Writer errors are sticky, so the last
// write reports any.
func write(w *bufio.Writer, n int) error {
	w.WriteString("{\"items\":[\n")
	for i := 1; i <= n; i++ {
		sep := ",\n"
		if i == n {
			sep = "\n"
		}
		id := fmt.Sprintf("item-%07d", i)
		fmt.Fprintf(w, `{"id":%q,"path":"images/%s.jpg","region":%q}%s`, id, id, regions[(i-1)%len(regions)], sep)
	}
	_, err := w.WriteString("]}\n")
	return err
}
