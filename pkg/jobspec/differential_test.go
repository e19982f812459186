package jobspec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jetfleet/jetfleet/internal/oldspec"
	"github.com/jetfleet/jetfleet/internal/oldspec/oldmessages"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// The differential test of the new front end against the old one
// (internal/oldspec: the old package jobspec and a verbatim copy of the old
// pkg/messages): on every entry of the fuzz corpora, both accept the same
// specs, with the same values and defaults, and refuse the others with the
// same problems at the same paths. It goes with internal/oldspec.

// specTargets are the fuzz targets whose corpora hold spec documents.
var specTargets = []string{"FuzzParseJobSpec", "FuzzParseJSON", "FuzzParseYAML", "FuzzSubmit", "FuzzFrontEnds"}

// durationTargets hold duration strings.
var durationTargets = []string{"FuzzParseDuration"}

func TestDifferentialCorpus(t *testing.T) {
	docs, sources := corpus(t, specTargets)
	for _, s := range fuzzSeeds(t) {
		docs = append(docs, s)
	}
	docs = append(docs, fuzzYAMLSeeds()...)
	for _, name := range []string{"testdata/design.yaml", "testdata/design.json", "testdata/bad.yaml"} {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, data)
	}
	lits := testLiterals(t)
	for _, l := range lits {
		docs = append(docs, []byte(l), []byte(withTop(l)), []byte(withStep(l)), []byte(withRetry(l)), []byte(withPolicy(l)))
	}
	accepted := 0
	for _, data := range docs {
		if compareFrontEnds(t, data) {
			accepted++
		}
	}
	durs, dsources := corpus(t, durationTargets)
	for _, s := range durationSeeds {
		durs = append(durs, []byte(s))
	}
	for _, s := range durs {
		compareDurations(t, string(s))
	}
	for _, l := range lits {
		compareDurations(t, l)
	}
	t.Logf("%d problems differed only by the old message that named a Go type", typeNameLeaks)
	t.Logf("differential: %d spec documents (%d accepted; corpora: %s; %d string literals of the tests, alone and in 4 wrappers), %d durations (corpora: %s)",
		len(docs), accepted, strings.Join(sources, ", "), len(lits), len(durs)+len(lits), strings.Join(dsources, ", "))
}

// FuzzFrontEnds runs the differential test on fuzzed documents.
func FuzzFrontEnds(f *testing.F) {
	docs, _ := corpus(f, specTargets)
	for _, d := range append(append(docs, fuzzSeeds(f)...), fuzzYAMLSeeds()...) {
		f.Add(d)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		compareFrontEnds(t, data)
		if len(data) < 200 {
			compareDurations(t, string(data))
		}
	})
}

// compareFrontEnds compares every entry point on data; it reports whether
// the spec was accepted.
func compareFrontEnds(t testing.TB, data []byte) bool {
	t.Helper()
	oldSpec, oldErr := oldspec.Parse(data)
	newSpec, newErr := Parse(data)
	compareSpecs(t, "Parse", data, oldSpec, oldErr, newSpec, newErr)

	oldJSON, oldJErr := oldspec.ParseJSON(data)
	newJSON, newJErr := parseSpec(data, true)
	compareSpecs(t, "ParseJSON", data, oldJSON, oldJErr, newJSON, newJErr)

	oldRC, oldRCErr := oldspec.ParseRetryConfig(data)
	newRC, newRCErr := ParseRetryConfig(data)
	compareProblems(t, "ParseRetryConfig", data, oldRCErr, newRCErr)
	if oldRCErr == nil && newRCErr == nil {
		sameJSON(t, "ParseRetryConfig", data, oldRC, newRC)
		sameJSON(t, "RetryConfigWithDefaults", data, oldRC.WithDefaults(), RetryConfigWithDefaults(newRC))
	}
	return oldErr == nil
}

func compareSpecs(t testing.TB, what string, data []byte, oldSpec *oldmessages.JobSpec, oldErr error, newSpec *messages.JobSpec, newErr error) {
	t.Helper()
	compareProblems(t, what, data, oldErr, newErr)
	if oldErr != nil || newErr != nil {
		return
	}
	sameJSON(t, what, data, oldSpec, newSpec)
	if len(oldSpec.Items) != len(newSpec.Items) {
		t.Fatalf("%s(%q): %d items, was %d", what, data, len(newSpec.Items), len(oldSpec.Items))
	}
	for i := range oldSpec.Items {
		if !bytes.Equal(oldSpec.Items[i], newSpec.Items[i]) {
			t.Errorf("%s(%q): items[%d] = %s, was %s", what, data, i, newSpec.Items[i], oldSpec.Items[i])
		}
	}
	if !reflect.DeepEqual(normalizeWith(oldSpec), normalizeWith(newSpec)) {
		t.Errorf("%s(%q): handler arguments differ", what, data)
	}
	sameJSON(t, what+" WithDefaults", data, oldSpec.WithDefaults(), WithDefaults(newSpec))
	if err := Validate(WithDefaults(newSpec)); err != nil {
		t.Errorf("%s(%q): defaults do not validate: %v", what, data, err)
	}
}

// normalizeWith collects the handler arguments of every step, whose Go
// types (json.Number, not float64 or string) JSON would not show.
func normalizeWith(spec any) []map[string]any {
	var out []map[string]any
	v := reflect.ValueOf(spec).Elem()
	for _, field := range []string{"AgentTemplate", "Reduce"} {
		steps := v.FieldByName(field)
		for i := range steps.Len() {
			out = append(out, steps.Index(i).FieldByName("With").Interface().(map[string]any))
		}
	}
	if ep := v.FieldByName("ErrorPolicy"); !ep.IsNil() {
		if a := ep.Elem().FieldByName("OnItemFailure"); !a.IsNil() {
			if c := a.Elem().FieldByName("Custom"); !c.IsNil() {
				out = append(out, c.Elem().FieldByName("With").Interface().(map[string]any))
			}
		}
	}
	return out
}

func sameJSON(t testing.TB, what string, data []byte, old, new any) {
	t.Helper()
	o, err1 := json.Marshal(old)
	n, err2 := json.Marshal(new)
	if err1 != nil || err2 != nil || !bytes.Equal(o, n) {
		t.Errorf("%s(%q):\nnew %s (%v)\nold %s (%v)", what, data, n, err2, o, err1)
	}
}

// compareProblems requires the same outcome and, for a refusal, the same
// problems in the same order: kind, path and message alike, and the same
// line (the new front end may give a line where the old one gave none).
func compareProblems(t testing.TB, what string, data []byte, oldErr, newErr error) {
	t.Helper()
	if (oldErr == nil) != (newErr == nil) {
		t.Fatalf("%s(%q): error %v, was %v", what, data, newErr, oldErr)
	}
	if oldErr == nil {
		return
	}
	var ov *oldmessages.ValidationError
	var nv *messages.ValidationError
	if !errors.As(oldErr, &ov) || !errors.As(newErr, &nv) {
		t.Fatalf("%s(%q): errors %T %v, was %T %v", what, data, newErr, newErr, oldErr, oldErr)
	}
	same := ov.Kind == nv.Kind && len(ov.Problems) == len(nv.Problems)
	leaks := 0
	for i := 0; same && i < len(ov.Problems); i++ {
		o, n := ov.Problems[i], nv.Problems[i]
		same = o.Field == n.Field && (o.Message == n.Message || leakedTypeName(o.Message)) &&
			(o.Line == n.Line || o.Line == 0 && n.Line > 0)
		if o.Message != n.Message {
			leaks++
		}
	}
	typeNameLeaks += leaks
	if !same {
		t.Errorf("%s(%q):\nnew %v\nold %v", what, data, newErr, oldErr)
	}
}

// typeNameLeaks counts the problems leakedTypeName let differ.
var typeNameLeaks int

// leakedTypeName reports the one known change of message: where a YAML
// value the converter could not read (a custom tag) stood inside a value
// of several forms, the old message named a Go type; the new one is the
// value's own problem, at the same path.
func leakedTypeName(msg string) bool {
	return strings.Contains(msg, "unsupported value of type oldmessages.InvalidValue") // messages. before the copy
}

func compareDurations(t testing.TB, s string) {
	t.Helper()
	o, oerr := oldmessages.ParseDuration(s)
	n, nerr := messages.ParseDuration(s)
	if (oerr == nil) != (nerr == nil) || int64(o) != int64(n) || oerr != nil && oerr.Error() != nerr.Error() {
		t.Errorf("ParseDuration(%q) = %d, %v; was %d, %v", s, int64(n), nerr, int64(o), oerr)
	}
}

// testLiterals returns every string literal of the tests of this package
// and of package messages: the inputs of their tables.
func testLiterals(t testing.TB) []string {
	var out []string
	for _, pattern := range []string{"*_test.go", "../messages/*_test.go"} {
		files, _ := filepath.Glob(pattern)
		for _, name := range files {
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						out = append(out, s)
					}
				}
				return true
			})
		}
	}
	return out
}

// corpus reads the fuzz corpora of targets: in testdata/fuzz of every
// package of the module, and in the Go build cache, where `go test -fuzz`
// keeps what it finds. It returns the first []byte or string of each
// entry, and the corpora it read with their counts.
func corpus(t testing.TB, targets []string) (entries [][]byte, sources []string) {
	t.Helper()
	var roots []string
	if root, err := filepath.Abs("../.."); err == nil {
		roots = append(roots, root)
	}
	if cache, err := os.UserCacheDir(); err == nil {
		gocache := os.Getenv("GOCACHE")
		if gocache == "" {
			gocache = filepath.Join(cache, "go-build")
		}
		roots = append(roots, filepath.Join(gocache, "fuzz", "github.com", "jetfleet", "jetfleet"))
	}
	wanted := map[string]bool{}
	for _, n := range targets {
		wanted[n] = true
	}
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			if !wanted[d.Name()] {
				return nil
			}
			files, _ := os.ReadDir(path)
			n := 0
			for _, f := range files {
				if v, ok := corpusEntry(filepath.Join(path, f.Name())); ok {
					entries = append(entries, v)
					n++
				}
			}
			rel, _ := filepath.Rel(root, path)
			sources = append(sources, fmt.Sprintf("%s=%d", rel, n))
			return filepath.SkipDir
		})
	}
	return entries, sources
}

// corpusEntry reads the first []byte or string value of a corpus file
// ("go test fuzz v1").
func corpusEntry(path string) ([]byte, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	if !sc.Scan() || sc.Text() != "go test fuzz v1" {
		return nil, false
	}
	for sc.Scan() {
		line := sc.Text()
		for _, prefix := range []string{"[]byte(", "string("} {
			if lit, ok := strings.CutPrefix(line, prefix); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
				return []byte(s), err == nil
			}
		}
	}
	return nil, false
}

// durationSeeds are the seeds of messages.FuzzParseDuration, and corners.
var (
	durationSeeds = []string{"500ms", "30s", "2m30s", "1h30m", "1d", "1w", "1.5s", ".5s", "0", "0s", "1h 30m", "1µs", "100ns",
		"1d2h3m4s5ms6us7ns", "106751d23h47m16s854ms775us807ns", "5 seconds", "-1s", "1.2.3s", "1h30", "", "9999999999999999999h",
		"1.5ns", "0.1ns", " 5 s ", "1.5d", ".25w", "1.", "1..2s", ".s", "5mins", "1x", "abc", "106751d23h47m16s854ms775us808ns",
		"99999999999999999999s", "300000w", "0.0000000005s", "1.0000000005s", "0.00000000001m", "2562047h47m16.854775807s", "1h\t30m"}
)
