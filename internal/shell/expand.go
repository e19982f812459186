package shell

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// Environment variables set for every shell step by [Vars.Environ].
const (
	EnvItemJSON      = "ITEM_JSON"
	EnvItemID        = "ITEM_ID"
	EnvJobID         = "JOB_ID"
	EnvAttempt       = "ATTEMPT"
	EnvMapResults    = "MAP_RESULTS"    // reduce steps only
	EnvMapSuccessful = "MAP_SUCCESSFUL" // reduce steps only
	EnvMapFailed     = "MAP_FAILED"     // reduce steps only
	EnvMapTotal      = "MAP_TOTAL"      // reduce steps only
)

// Vars are the values a template's references resolve to. A Vars is a plain
// value; it is safe for concurrent use as long as LookupEnv is.
type Vars struct {
	// Item is the item's JSON: ${item} and ${item.a.b}.
	Item json.RawMessage
	// ItemID is ${item_id}.
	ItemID string
	// JobID is ${job_id}.
	JobID string
	// Attempt is ${attempt}, 1-based.
	Attempt int
	// ItemWorkdir is ${item_workdir}: the directory the step runs in.
	ItemWorkdir string
	// LookupEnv resolves ${env.NAME} in the step's environment (the agent
	// passes one that looks in Command.Env). Nil: no variable is set, so
	// that a template never reads the agent's own environment.
	LookupEnv func(name string) (string, bool)
	// Map holds the ${map.*} values of a reduce step; nil elsewhere.
	Map *MapVars
	// ItemIndex is ${item_index}: the item's 0-based position in the input.
	ItemIndex int64
	// ItemTotal is ${item_total}: the number of the job's items.
	ItemTotal int64
	// LookupJobEnv resolves a bare ${NAME} that no step captured in the
	// job's env (Prodigy reads its workflow's env so); nil: none.
	LookupJobEnv func(name string) (string, bool)
	// Captures are the variables earlier steps captured: ${NAME},
	// ${NAME.field}, ${NAME.exit_code}.
	Captures map[string]*wire.Capture
	// Last is ${shell.output} and ${last.output}, the previous step's
	// output; HasLast is false in a first step.
	Last    string
	HasLast bool
}

// MaxMapResultsJSON bounds ${map.results_json} (Prodigy's ${map.results}):
// the map results' JSON is pasted into the command, which Linux holds to
// 128 KiB an argument or environment variable. Above it the reference is
// an error that names the file to read instead.
const MaxMapResultsJSON = 100 << 10

// maxMapResultsRead bounds the map results read for a path into them
// (${map.results[0].output}).
const maxMapResultsRead = 16 << 20

// MapVars are the values of a reduce step's ${map.*} references.
type MapVars struct {
	// Results is ${map.results} (and ${map.results_file}): the path of the
	// file holding the map phase's results, a JSON array;
	// ${map.results_json} is its text.
	Results string
	// Successful, Failed and Total are ${map.successful}, ${map.failed}
	// and ${map.total}.
	Successful, Failed, Total int
}

// Environ returns the variables describing the item, as NAME=value strings
// for [Command.Env]: ITEM_JSON, ITEM_ID, JOB_ID, ATTEMPT, and MAP_RESULTS,
// MAP_SUCCESSFUL, MAP_FAILED, MAP_TOTAL when v.Map is set.
func (v Vars) Environ() []string {
	env := []string{
		EnvItemJSON + "=" + string(v.Item),
		EnvItemID + "=" + v.ItemID,
		EnvJobID + "=" + v.JobID,
		EnvAttempt + "=" + strconv.Itoa(v.Attempt),
	}
	if m := v.Map; m != nil {
		env = append(env,
			EnvMapResults+"="+m.Results,
			EnvMapSuccessful+"="+strconv.Itoa(m.Successful),
			EnvMapFailed+"="+strconv.Itoa(m.Failed),
			EnvMapTotal+"="+strconv.Itoa(m.Total),
		)
	}
	return env
}

// RefError is a reference that could not be expanded. errors.Is matches its
// kind (ErrItemField, ErrEnvUnset, ErrNoMap, ErrUnsafePosition, ErrNUL,
// ErrUnknownRef) and the underlying error.
type RefError struct {
	// Ref is the reference as written, e.g. "${item.path}".
	Ref string
	// Line is the reference's 1-based line in a template of several lines,
	// 0 when not known.
	Line int
	// Kind is one of the package's expansion sentinels.
	Kind error
	// Err says what is wrong.
	Err error
}

func (e *RefError) Error() string {
	if e.Line > 0 {
		return e.Ref + " (line " + strconv.Itoa(e.Line) + "): " + e.Err.Error()
	}
	return e.Ref + ": " + e.Err.Error()
}

// Unwrap returns the kind and the underlying error.
func (e *RefError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Expand renders t as a script for "sh -c": [Compile], then
// [Script.Expand]. Every reference becomes one literal shell word (or the
// literal part of one), whatever its value holds: a bare ${item.x} is
// written with [Quote]; inside "..." the characters special there are
// escaped; inside '...' the quotes are closed and reopened around embedded
// single quotes. References in comments are left as written and not
// resolved. Positions where no quoting is safe are refused by Compile.
//
// ${item} is the whole item: its JSON text, or the scalar itself; a string
// field is its text, a number or bool as written, an object or array its
// compact JSON ([wire.LookupItemField]). A missing field, an unset
// ${env.NAME}, a ${map.*} without v.Map, and a value holding a NUL byte
// are errors; the returned error joins one *RefError per bad reference.
//
// Expand parses the template every time; compile it once with Compile to
// expand it for many items.
func Expand(t wire.Template, v Vars) (string, error) {
	s, err := Compile(t)
	if err != nil {
		return "", err
	}
	return s.Expand(v)
}

// Text renders t as plain text, each reference its value unquoted, for a
// value that reaches no shell (a claude step's prompt, one argument of
// its command). The references and their errors are Expand's.
func (v Vars) Text(t wire.Template) (string, error) {
	var b strings.Builder
	var errs []error
	for _, p := range t.Parts {
		if p.Ref == nil {
			b.WriteString(p.Literal)
			continue
		}
		val, err := p.Apply(v.resolve(p.Ref))
		if err == nil && strings.IndexByte(val, 0) >= 0 {
			err = errors.New("the value holds a NUL byte")
		}
		if err != nil {
			errs = append(errs, &RefError{Ref: p.Text(), Kind: kindOf(err), Err: err})
			continue
		}
		b.WriteString(val)
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return b.String(), nil
}

// Validate reports every reference of t that stands where no quoting is
// safe, and a template with references that does not parse (see
// [Compile]), without resolving any value. Use it to reject a shell step
// at submission rather than at run time.
func Validate(t wire.Template) error {
	_, err := Compile(t)
	return err
}

func refText(ref []string) string { return "${" + strings.Join(ref, ".") + "}" }

// resolveError carries the kind of a resolution failure.
type resolveError struct {
	kind error
	msg  string
}

func (e *resolveError) Error() string { return e.msg }

func kindOf(err error) error {
	var re *resolveError
	if errors.As(err, &re) {
		return re.kind
	}
	return ErrItemField
}

func (v Vars) resolve(ref []string) (string, error) {
	switch ref[0] {
	case wire.RefItem:
		return wire.LookupItemField(v.Item, ref[1:])
	case wire.RefItemID:
		return v.ItemID, nil
	case wire.RefJobID:
		return v.JobID, nil
	case wire.RefAttempt:
		return strconv.Itoa(v.Attempt), nil
	case wire.RefItemWorkdir:
		return v.ItemWorkdir, nil
	case wire.RefItemIndex:
		return strconv.FormatInt(v.ItemIndex, 10), nil
	case wire.RefItemTotal:
		return strconv.FormatInt(v.ItemTotal, 10), nil
	case wire.RefShell, wire.RefLast:
		if !v.HasLast {
			return "", &resolveError{ErrUnknownRef, "no step ran before this one"}
		}
		return v.Last, nil
	case wire.RefMap:
		if v.Map == nil {
			return "", &resolveError{ErrNoMap, "map values are only available in reduce steps"}
		}
		switch ref[1] {
		case "results", wire.MapResultsFile:
			return v.Map.Results, nil
		case wire.MapResultsJSON:
			return v.Map.resultsJSON(ref[2:])
		case wire.MapSuccessRate:
			if v.Map.Total == 0 {
				return "0", nil
			}
			rate := math.Round(float64(v.Map.Successful)*10000/float64(v.Map.Total)) / 100
			return strconv.FormatFloat(rate, 'f', -1, 64), nil
		case "successful":
			return strconv.Itoa(v.Map.Successful), nil
		case "failed":
			return strconv.Itoa(v.Map.Failed), nil
		case "total":
			return strconv.Itoa(v.Map.Total), nil
		}
	case wire.RefEnv:
		if v.LookupEnv != nil {
			if val, ok := v.LookupEnv(ref[1]); ok {
				return val, nil
			}
		}
		return "", &resolveError{ErrEnvUnset, fmt.Sprintf("environment variable %s is not set", ref[1])}
	}
	if wire.IsVarRef(ref) {
		c := v.Captures[ref[0]]
		if c == nil && len(ref) == 1 && v.LookupJobEnv != nil {
			if val, ok := v.LookupJobEnv(ref[0]); ok {
				return val, nil
			}
		}
		if c == nil {
			return "", &resolveError{ErrUnknownRef, fmt.Sprintf("no earlier step captured %q", ref[0])}
		}
		val, err := c.Lookup(ref[1:])
		if err != nil {
			return "", &resolveError{ErrUnknownRef, fmt.Sprintf("%s: %v", ref[0], err)}
		}
		return val, nil
	}
	// ParseTemplate admits no other reference; a hand-built Template might.
	return "", &resolveError{ErrUnknownRef, fmt.Sprintf("unknown reference %q", strings.Join(ref, "."))}
}

// resultsJSON is ${map.results_json}, or a path into it: the map results'
// JSON text, bounded by MaxMapResultsJSON when pasted whole.
func (m *MapVars) resultsJSON(path []string) (string, error) {
	f, err := os.Open(m.Results)
	if err != nil {
		return "", &resolveError{ErrNoMap, fmt.Sprintf("the map results: %v", err)}
	}
	defer f.Close()
	limit := int64(MaxMapResultsJSON)
	if len(path) > 0 {
		limit = maxMapResultsRead
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return "", &resolveError{ErrNoMap, fmt.Sprintf("the map results: %v", err)}
	}
	if int64(len(data)) > limit {
		return "", &resolveError{ErrMapResultsSize, fmt.Sprintf("the map results' JSON is over %d bytes, more than a command can hold: read the file instead, ${map.results_file} or $%s", limit, EnvMapResults)}
	}
	if len(path) == 0 {
		return string(bytes.TrimSpace(data)), nil
	}
	val, err := wire.LookupItemField(data, path)
	if err != nil {
		return "", &resolveError{ErrItemField, strings.Replace(err.Error(), "item", "map.results", 1)}
	}
	return val, nil
}
