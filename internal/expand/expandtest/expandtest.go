// Package expandtest writes the sample job input of the expansion and
// memory tests and of scripts/genitems.
package expandtest

import (
	"bufio"
	"fmt"
	"io"
)

// Regions are the regions of the items WriteItems writes, in turn.
var Regions = []string{"eu", "us", "ap"}

// WriteItems writes a document of n items to w,
//
//	{"items":[
//	{"id":"item-0000001","path":"images/item-0000001.jpg","region":"eu"},
//	...
//	]}
//
// one item a line, regions cycling through Regions: an input for
// json_path "$.items[*]" and group_by "${item.region}".
func WriteItems(w io.Writer, n int) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString("{\"items\":[\n")
	for i := 1; i <= n; i++ {
		sep := ",\n"
		if i == n {
			sep = "\n"
		}
		id := fmt.Sprintf("item-%07d", i)
		fmt.Fprintf(bw, `{"id":%q,"path":"images/%s.jpg","region":%q}%s`, id, id, Regions[(i-1)%len(Regions)], sep)
	}
	bw.WriteString("]}\n")
	return bw.Flush() // bufio.Writer errors are sticky: Flush reports any
}
