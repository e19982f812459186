package oldmessages

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// ParseJobSpec decodes and validates a job spec in JSON. Decoding is strict
// (unknown fields, duplicate keys, wrong types, bad durations and invalid
// enum values are problems) and every problem, together with every
// validation problem of [JobSpec.Validate], is reported at once in a
// *[ValidationError] (errors.Is(err, [ErrInvalidSpec]) holds). When the
// JSON spans several lines, problems carry the line of their field.
//
// checks run after the built-in validation, on the spec as decoded even
// when it has problems; theirs are reported with the others (and dropped
// at or under a field that failed to decode).
func ParseJobSpec(data []byte, checks ...SpecCheck) (*JobSpec, error) {
	tree, lines, pre := parseJSONTree(data, multiLine(data))
	if tree == nil && len(pre) > 0 {
		return nil, &ValidationError{Problems: pre}
	}
	spec, verr := decodeJobSpec(tree, pre, checks)
	if verr != nil {
		verr.SetLines(lines)
		return nil, verr
	}
	return spec, nil
}

// DecodeJobSpec decodes and validates a job spec from a generic tree:
// map[string]any, []any, string, bool, nil, and numbers as json.Number,
// float64 or any integer type — what encoding/json produces when decoding
// into an `any`, and what package jobspec produces from YAML — and
// json.RawMessage for an already-encoded value (inline items given that way
// keep their key order; others are compacted as in [CompactJSON]). Problems are
// reported as by [ParseJobSpec], without lines. A tree producer reports a
// value it could not convert by putting an [InvalidValue] in its place.
// checks are run as by ParseJobSpec.
func DecodeJobSpec(tree any, checks ...SpecCheck) (*JobSpec, error) {
	spec, verr := decodeJobSpec(tree, nil, checks)
	if verr != nil {
		return nil, verr
	}
	return spec, nil
}

// ParseRetryConfig decodes and validates a standalone retry_config document
// in JSON, as a step's retry_config is validated. The document may also be
// wrapped as {"retry_config": {...}}.
func ParseRetryConfig(data []byte) (*RetryConfig, error) {
	tree, lines, pre := parseJSONTree(data, multiLine(data))
	if tree == nil && len(pre) > 0 {
		return nil, &ValidationError{Kind: KindRetryConfig, Problems: pre}
	}
	rc, verr := decodeRetryConfig(tree, pre)
	if verr != nil {
		verr.SetLines(lines)
		return nil, verr
	}
	return rc, nil
}

// DecodeRetryConfig is ParseRetryConfig for a generic tree (see
// [DecodeJobSpec]). Problem paths are relative to the retry config
// ("backoff.exponential.base"), or start with "retry_config." when the
// document is wrapped.
func DecodeRetryConfig(tree any) (*RetryConfig, error) {
	rc, verr := decodeRetryConfig(tree, nil)
	if verr != nil {
		return nil, verr
	}
	return rc, nil
}

// SpecCheck is a validation that needs more than the standard library
// (package jobspec checks where shell commands place their references):
// it returns the spec's problems, each with its field path.
type SpecCheck func(*JobSpec) []FieldError

func decodeJobSpec(tree any, pre []FieldError, checks []SpecCheck) (*JobSpec, *ValidationError) {
	d := newDecoder()
	var spec JobSpec
	d.value("", tree, reflect.ValueOf(&spec).Elem())
	v := &validator{bad: d.bad, given: d.given}
	v.jobSpec(&spec)
	for _, check := range checks {
		for _, p := range check(&spec) {
			v.addf(p.Field, "%s", p.Message)
		}
	}
	probs := append(append(pre, d.problems...), v.problems...)
	if len(probs) > 0 {
		return nil, &ValidationError{Problems: probs}
	}
	return &spec, nil
}

func decodeRetryConfig(tree any, pre []FieldError) (*RetryConfig, *ValidationError) {
	path := ""
	if m, ok := tree.(map[string]any); ok && len(m) == 1 {
		if inner, ok := m["retry_config"]; ok {
			tree, path = inner, "retry_config"
		}
	}
	d := newDecoder()
	var rc RetryConfig
	d.value(path, tree, reflect.ValueOf(&rc).Elem())
	v := &validator{bad: d.bad, given: d.given}
	v.retryConfig(path, &rc, false)
	probs := append(append(pre, d.problems...), v.problems...)
	if len(probs) > 0 {
		return nil, &ValidationError{Kind: KindRetryConfig, Problems: probs}
	}
	return &rc, nil
}

func multiLine(data []byte) bool {
	return bytes.IndexByte(bytes.TrimSpace(data), '\n') >= 0
}

// decoder walks a generic tree against a Go value, collecting every problem.
type decoder struct {
	problems []FieldError
	// bad holds the paths whose value failed to decode; validation
	// problems at or under them are redundant and dropped.
	bad map[string]bool
	// given holds the paths present (non-null) in the document, so that
	// validation can tell an explicit 0 from an unset field.
	given map[string]bool
}

func newDecoder() *decoder {
	return &decoder{bad: map[string]bool{}, given: map[string]bool{}}
}

func (d *decoder) addf(path, format string, args ...any) {
	d.problems = append(d.problems, FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
	d.bad[path] = true
}

func (d *decoder) typeErr(path, want string, v any) {
	msg := fmt.Sprintf("expected %s, got %s", want, describe(v))
	if _, isStr := v.(string); !isStr && want == "a string" && v != nil {
		if _, isMap := v.(map[string]any); !isMap {
			if _, isArr := v.([]any); !isArr {
				msg += " (quote it in YAML)"
			}
		}
	}
	d.problems = append(d.problems, FieldError{Field: path, Message: msg})
	d.bad[path] = true
}

// err returns the problems as a *ValidationError, or nil.
func (d *decoder) err() error {
	if len(d.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: d.problems}
}

// A hook decodes a type that has no plain struct/slice/map shape. It is
// called with the tree value (possibly nil, for array elements) and a
// settable value of its type, and reports whether it set the value; when
// it did not, the path is marked bad (its problem is already recorded).
type hook func(d *decoder, path string, v any, rv reflect.Value) bool

var (
	hooksOnce sync.Once
	hooks     map[reflect.Type]hook
)

func hookFor(t reflect.Type) hook {
	hooksOnce.Do(func() {
		hooks = map[reflect.Type]hook{
			reflect.TypeFor[Duration]():          decodeDurationHook,
			reflect.TypeFor[json.RawMessage]():   decodeRawHook,
			reflect.TypeFor[Backoff]():           decodeBackoffHook,
			reflect.TypeFor[Matcher]():           decodeMatcherHook,
			reflect.TypeFor[OnFailure]():         decodeOnFailureHook,
			reflect.TypeFor[ItemFailureAction](): decodeItemFailureHook,
			reflect.TypeFor[ErrorCollection]():   decodeErrorCollectionHook,
			reflect.TypeFor[BudgetValue]():       decodeBudgetHook,
		}
	})
	return hooks[t]
}

// value decodes v into rv at path.
func (d *decoder) value(path string, v any, rv reflect.Value) {
	if iv, ok := v.(InvalidValue); ok {
		d.addf(path, "%s", iv.Problem)
		return
	}
	if raw, ok := v.(json.RawMessage); ok && rv.Type() != reflect.TypeFor[json.RawMessage]() {
		n, fe := normalize(path, raw, 0)
		if fe != nil {
			d.addf(fe.Field, "%s", fe.Message)
			d.bad[path] = true
			return
		}
		v = n
	}
	if h := hookFor(rv.Type()); h != nil {
		if !h(d, path, v, rv) {
			d.bad[path] = true
		}
		return
	}
	switch rv.Kind() {
	case reflect.Pointer:
		if v == nil {
			rv.SetZero()
			return
		}
		p := reflect.New(rv.Type().Elem())
		d.value(path, v, p.Elem())
		rv.Set(p)
	case reflect.Struct:
		d.object(path, v, rv)
	case reflect.Slice:
		arr, ok := v.([]any)
		if !ok {
			d.typeErr(path, "an array", v)
			return
		}
		if len(arr) == 0 {
			rv.SetZero()
			return
		}
		s := reflect.MakeSlice(rv.Type(), len(arr), len(arr))
		for i, e := range arr {
			d.value(IndexPath(path, i), e, s.Index(i))
		}
		rv.Set(s)
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			d.typeErr(path, "an object", v)
			return
		}
		if len(m) == 0 {
			rv.SetZero()
			return
		}
		out := reflect.MakeMapWithSize(rv.Type(), len(m))
		for _, k := range sortedKeys(m) {
			e := reflect.New(rv.Type().Elem()).Elem()
			d.value(JoinPath(path, k), m[k], e)
			out.SetMapIndex(reflect.ValueOf(k).Convert(rv.Type().Key()), e)
		}
		rv.Set(out)
	case reflect.String:
		s, ok := v.(string)
		if !ok {
			d.typeErr(path, "a string", v)
			return
		}
		rv.SetString(s)
	case reflect.Bool:
		b, ok := v.(bool)
		if !ok {
			d.typeErr(path, "a boolean (true or false)", v)
			return
		}
		rv.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if !isNumber(v) {
			d.typeErr(path, "an integer", v)
			return
		}
		n, err := asInt(v)
		if err != nil {
			d.addf(path, "%v", err)
			return
		}
		if rv.OverflowInt(n) {
			d.addf(path, "number %d is out of range", n)
			return
		}
		rv.SetInt(n)
	case reflect.Float32, reflect.Float64:
		if !isNumber(v) {
			d.typeErr(path, "a number", v)
			return
		}
		f, err := asFloat(v)
		if err != nil {
			d.addf(path, "%v", err)
			return
		}
		rv.SetFloat(f)
	case reflect.Interface:
		if v == nil {
			rv.SetZero()
			return
		}
		n, fe := normalize(path, v, 0)
		if fe != nil {
			d.addf(fe.Field, "%s", fe.Message)
			d.bad[path] = true
			return
		}
		rv.Set(reflect.ValueOf(n))
	default:
		d.addf(path, "cannot decode into %s", rv.Type())
	}
}

// object decodes a JSON object into a struct by its json tags. A null
// field is unset; unknown fields are problems with a suggestion.
func (d *decoder) object(path string, v any, rv reflect.Value) {
	m, ok := v.(map[string]any)
	if !ok {
		d.typeErr(path, "an object", v)
		return
	}
	fields := structFields(rv.Type())
	for _, f := range fields {
		fv, ok := m[f.name]
		if !ok || fv == nil {
			continue
		}
		p := JoinPath(path, f.name)
		d.given[p] = true
		d.value(p, fv, rv.Field(f.index))
	}
	for _, k := range sortedKeys(m) {
		if fieldIndex(fields, k) < 0 {
			s := suggestField(rv.Type(), k)
			if s == "" {
				d.addf(JoinPath(path, k), "unknown field")
			} else {
				d.addf(JoinPath(path, k), "unknown field (did you mean %q?)", s)
				// A misspelt field counts as given but unusable, so that
				// validation does not also report it missing.
				if top, _, _ := strings.Cut(s, "."); m[top] == nil {
					d.bad[JoinPath(path, s)] = true
				}
			}
		}
	}
}

type structField struct {
	name  string
	index int
}

var fieldCache sync.Map // reflect.Type -> []structField

func structFields(t reflect.Type) []structField {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]structField)
	}
	var fs []structField
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fs = append(fs, structField{name: name, index: i})
	}
	fieldCache.Store(t, fs)
	return fs
}

func fieldIndex(fs []structField, name string) int {
	for _, f := range fs {
		if f.name == name {
			return f.index
		}
	}
	return -1
}

// suggestField returns the field an unknown key of a struct probably
// meant: a close field name, or a field of a nested struct
// ("retry_config.attempts" for "attempts" on a step), or "".
func suggestField(t reflect.Type, key string) string {
	var names []string
	for _, f := range structFields(t) {
		names = append(names, f.name)
	}
	if s := closest(key, names); s != "" {
		return s
	}
	for _, f := range structFields(t) {
		ft := t.Field(f.index).Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() != reflect.Struct || hookFor(ft) != nil {
			continue
		}
		if fieldIndex(structFields(ft), key) >= 0 {
			return f.name + "." + key
		}
	}
	return ""
}

// suggestion returns ` (did you mean "x"?)` when a name is close to word.
func suggestion(word string, names []string) string {
	if s := closest(word, names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

// closest returns the name closest to word when it is plausibly a typo:
// equal ignoring case, '_' and '-', or within a small edit distance.
func closest(word string, names []string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
	}
	for _, n := range names {
		if norm(n) == norm(word) {
			return n
		}
	}
	// "attempts" for "max_attempts", "delay" for "fixed_delay": a unique
	// name that is word with a prefix or suffix.
	affix := ""
	for _, n := range names {
		if strings.HasSuffix(n, "_"+word) || strings.HasPrefix(n, word+"_") {
			if affix != "" {
				affix = ""
				break
			}
			affix = n
		}
	}
	if affix != "" {
		return affix
	}
	best, bestD := "", 0
	for _, n := range names {
		dist := editDistance(strings.ToLower(word), n)
		limit := 2
		if len(n) <= 4 {
			limit = 1
		}
		if dist <= limit && (best == "" || dist < bestD) {
			best, bestD = n, dist
		}
	}
	return best
}

// editDistance is the optimal string alignment distance (Levenshtein plus
// adjacent transpositions) between a and b, over bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// oneKey checks that m has exactly one key and returns it with its value.
func (d *decoder) oneKey(path string, m map[string]any, what string) (string, any, bool) {
	if len(m) != 1 {
		keys := sortedKeys(m)
		if len(keys) == 0 {
			d.addf(path, "expected %s, got an empty object", what)
		} else {
			d.addf(path, "expected %s, got an object with %d keys (%s)", what, len(keys), strings.Join(keys, ", "))
		}
		return "", nil, false
	}
	for k, v := range m {
		return k, v, true
	}
	return "", nil, false
}
