package jobspec

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/jetfleet/jetfleet/internal/jsonnode"
	"github.com/jetfleet/jetfleet/internal/suggest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// decoder walks a generic tree against a Go value, collecting every problem.
type decoder struct {
	problems []messages.FieldError
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
	d.problems = append(d.problems, messages.FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
	d.bad[path] = true
}

func (d *decoder) typeErr(path, want string, v any) {
	if iv, ok := v.(invalidValue); ok {
		d.addf(path, "%s", iv.problem)
		return
	}
	msg := fmt.Sprintf("expected %s, got %s", want, jsonnode.Describe(v))
	if _, isStr := v.(string); !isStr && want == "a string" && v != nil {
		if _, isMap := v.(map[string]any); !isMap {
			if _, isArr := v.([]any); !isArr {
				msg += " (quote it in YAML)"
			}
		}
	}
	d.problems = append(d.problems, messages.FieldError{Field: path, Message: msg})
	d.bad[path] = true
}

// data checks free-form data (handler arguments, an item) for values the
// converter could not convert, and reports the first at its own path.
func (d *decoder) data(path string, v any) bool {
	p, iv, bad := firstInvalid(path, v)
	if bad {
		d.addf(p, "%s", iv.problem)
		d.bad[path] = true
	}
	return !bad
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
			reflect.TypeFor[messages.Duration]():          decodeDurationHook,
			reflect.TypeFor[json.RawMessage]():            decodeRawHook,
			reflect.TypeFor[messages.Backoff]():           decodeBackoffHook,
			reflect.TypeFor[messages.Matcher]():           decodeMatcherHook,
			reflect.TypeFor[messages.OnFailure]():         decodeOnFailureHook,
			reflect.TypeFor[messages.ItemFailureAction](): decodeItemFailureHook,
			reflect.TypeFor[messages.ErrorCollection]():   decodeErrorCollectionHook,
			reflect.TypeFor[messages.BudgetValue]():       decodeBudgetHook,
			reflect.TypeFor[messages.Rate]():              decodeRateHook,
			reflect.TypeFor[messages.StepLimit]():         decodeStepLimitHook,
		}
	})
	return hooks[t]
}

// value decodes v into rv at path.
func (d *decoder) value(path string, v any, rv reflect.Value) {
	if iv, ok := v.(invalidValue); ok {
		d.addf(path, "%s", iv.problem)
		return
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
			d.value(messages.IndexPath(path, i), e, s.Index(i))
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
			d.value(messages.JoinPath(path, k), m[k], e)
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
		if _, ok := v.(json.Number); !ok {
			d.typeErr(path, "an integer", v)
			return
		}
		n, err := jsonnode.AsInt(v)
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
		n, ok := v.(json.Number)
		if !ok {
			d.typeErr(path, "a number", v)
			return
		}
		f, err := jsonnode.AsFloat(n)
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
		if !d.data(path, v) {
			return
		}
		rv.Set(reflect.ValueOf(v))
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
		p := messages.JoinPath(path, f.name)
		d.given[p] = true
		d.value(p, fv, rv.Field(f.index))
	}
	for _, k := range sortedKeys(m) {
		if fieldIndex(fields, k) < 0 {
			s := suggestField(rv.Type(), k)
			if s == "" {
				d.addf(messages.JoinPath(path, k), "unknown field")
			} else {
				d.addf(messages.JoinPath(path, k), "unknown field (did you mean %q?)", s)
				// A misspelt field counts as given but unusable, so that
				// validation does not also report it missing.
				if top, _, _ := strings.Cut(s, "."); m[top] == nil {
					d.bad[messages.JoinPath(path, s)] = true
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
	if s := suggest.Closest(key, names); s != "" {
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
	if s := suggest.Closest(word, names); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
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
