package shell

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
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
	// LookupEnv resolves ${env.NAME}. Defaults to os.LookupEnv.
	LookupEnv func(name string) (string, bool)
	// Map holds the ${map.*} values of a reduce step; nil elsewhere.
	Map *MapVars
}

// MapVars are the values of a reduce step's ${map.*} references.
type MapVars struct {
	// Results is ${map.results}: where the map phase's results are.
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
// ErrUnknownRef) and
// the underlying error.
type RefError struct {
	// Ref is the reference as written, e.g. "${item.path}".
	Ref string
	// Kind is one of the package's expansion sentinels.
	Kind error
	// Err says what is wrong.
	Err error
}

func (e *RefError) Error() string { return e.Ref + ": " + e.Err.Error() }

// Unwrap returns the kind and the underlying error.
func (e *RefError) Unwrap() []error { return []error{e.Kind, e.Err} }

// Expand renders t as a script for "sh -c". Every reference becomes one
// literal shell word (or the literal part of one), whatever its value holds:
// a bare ${item.x} is written with [Quote]; inside "..." the characters
// special there are escaped; inside '...' the quotes are closed and
// reopened around embedded single quotes. References in comments are left
// as written and not resolved. A reference where no quoting is safe —
// inside `...`, a here-document, ${...} or $((...)), after a backslash,
// after bash's $'...', or after a case statement inside $(...) — is an
// ErrUnsafePosition error.
//
// ${item} is the whole item: its JSON text, or the scalar itself; a string
// field is its text, a number or bool as written, an object or array its
// compact JSON ([messages.LookupItemField]). A missing field, an unset
// ${env.NAME}, a ${map.*} without v.Map, and a value holding a NUL byte
// are errors; the returned error joins one *RefError per bad reference.
func Expand(t messages.Template, v Vars) (string, error) {
	var b strings.Builder
	b.Grow(len(t.Raw) + 32)
	lx := newLexer()
	var errs []error
	for _, p := range t.Parts {
		if p.Ref == nil {
			lx.feed(p.Literal)
			b.WriteString(p.Literal)
			continue
		}
		ref := refText(p.Ref)
		enc, err := lx.ref()
		if err != nil {
			errs = append(errs, &RefError{Ref: ref, Kind: ErrUnsafePosition, Err: fmt.Errorf("cannot be quoted safely %w", err)})
			continue
		}
		if enc == encLiteral {
			b.WriteString(ref)
			continue
		}
		val, err := v.resolve(p.Ref)
		if err != nil {
			errs = append(errs, &RefError{Ref: ref, Kind: kindOf(err), Err: err})
			continue
		}
		if strings.IndexByte(val, 0) >= 0 {
			errs = append(errs, &RefError{Ref: ref, Kind: ErrNUL, Err: errors.New("value contains a NUL byte")})
			continue
		}
		switch enc {
		case encWord:
			b.WriteString(Quote(val))
		case encSingle:
			b.WriteString(quoteInSingle(val))
		case encDouble:
			b.WriteString(quoteInDouble(val))
		}
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return b.String(), nil
}

// Validate reports every reference of t that stands where no quoting is
// safe (see [Expand]), without resolving any value. Use it to reject a
// shell step at submission rather than at run time.
func Validate(t messages.Template) error {
	lx := newLexer()
	var errs []error
	for _, p := range t.Parts {
		if p.Ref == nil {
			lx.feed(p.Literal)
			continue
		}
		if _, err := lx.ref(); err != nil {
			errs = append(errs, &RefError{Ref: refText(p.Ref), Kind: ErrUnsafePosition, Err: fmt.Errorf("cannot be quoted safely %w", err)})
		}
	}
	return errors.Join(errs...)
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
	case messages.RefItem:
		return messages.LookupItemField(v.Item, ref[1:])
	case messages.RefItemID:
		return v.ItemID, nil
	case messages.RefJobID:
		return v.JobID, nil
	case messages.RefAttempt:
		return strconv.Itoa(v.Attempt), nil
	case messages.RefMap:
		if v.Map == nil {
			return "", &resolveError{ErrNoMap, "map values are only available in reduce steps"}
		}
		switch ref[1] {
		case "results":
			return v.Map.Results, nil
		case "successful":
			return strconv.Itoa(v.Map.Successful), nil
		case "failed":
			return strconv.Itoa(v.Map.Failed), nil
		case "total":
			return strconv.Itoa(v.Map.Total), nil
		}
	case messages.RefEnv:
		lookup := v.LookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		if val, ok := lookup(ref[1]); ok {
			return val, nil
		}
		return "", &resolveError{ErrEnvUnset, fmt.Sprintf("environment variable %s is not set", ref[1])}
	}
	// ParseTemplate admits no other reference; a hand-built Template might.
	return "", &resolveError{ErrUnknownRef, fmt.Sprintf("unknown reference %q", strings.Join(ref, "."))}
}
