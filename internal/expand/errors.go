package expand

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by this package wraps one of them
// (or a context or I/O error); compare with [errors.Is].
var (
	// ErrSpec: the spec cannot be expanded (items and input both set,
	// json_path without input, a group_by that cannot be evaluated here).
	ErrSpec = errors.New("expand: invalid spec")
	// ErrJSONPath: json_path is not a valid JSONPath (RFC 9535) query, or
	// selects a single value rather than a list of items.
	ErrJSONPath = errors.New("expand: invalid json_path")
	// ErrRef: an input reference that no opener understands.
	ErrRef = errors.New("expand: invalid input reference")
	// ErrFileInputsOff: a file input on a coordinator that serves none
	// (it has no input directory).
	ErrFileInputsOff = errors.New("expand: file inputs are off")
	// ErrFileNotFound: a file input that is not a readable regular file
	// inside the input directory.
	ErrFileNotFound = errors.New("expand: input file not found")
	// ErrMalformedJSON: the input (or an inline item) is not valid JSON.
	ErrMalformedJSON = errors.New("expand: malformed JSON")
	// ErrPathNotFound: a field named by json_path is not in the input.
	ErrPathNotFound = errors.New("expand: json_path not found")
	// ErrNotArray: json_path's [*] applies to something other than an array.
	ErrNotArray = errors.New("expand: json_path does not select an array")
	// ErrDuplicateField: a field named by json_path appears twice in the
	// same object, so which one holds the items is ambiguous.
	ErrDuplicateField = errors.New("expand: duplicate field on json_path")
	// ErrInputTooLarge: a json_path that needs the whole document in
	// memory met an input larger than the configured maximum.
	ErrInputTooLarge = errors.New("expand: input too large for json_path")
	// ErrItemID: an item's id is empty.
	ErrItemID = errors.New("expand: invalid item id")
	// ErrDuplicateID: two items have the same id.
	ErrDuplicateID = errors.New("expand: duplicate item id")
	// ErrGroup: group_by cannot be evaluated for an item (missing field,
	// empty result).
	ErrGroup = errors.New("expand: cannot evaluate group_by")
	// ErrTooManyGroups: group_by yields more groups than the configured
	// maximum.
	ErrTooManyGroups = errors.New("expand: too many groups")
	// ErrTooManyItems: the spec has more items than the configured maximum.
	ErrTooManyItems = errors.New("expand: too many items")
	// ErrSelection: filter, sort_by or distinct does not parse.
	ErrSelection = errors.New("expand: invalid item selection")
	// ErrSortTooLarge: the items sort_by must hold in memory take more
	// than the configured maximum.
	ErrSortTooLarge = errors.New("expand: too many items to sort")
	// ErrPathTooCostly: a json_path that cannot be streamed selects or
	// visits more nodes than the configured maximum.
	ErrPathTooCostly = errors.New("expand: json_path selects or visits too many nodes")
)

// ItemError is a problem with one item. Index is the item's 0-based
// position among the items; ID is its id when known.
type ItemError struct {
	Index int64
	ID    string
	Err   error
}

func (e *ItemError) Error() string { return fmt.Sprintf("items[%d]: %v", e.Index, e.Err) }

func (e *ItemError) Unwrap() error { return e.Err }

// SyntaxError is malformed JSON in an input document. Offset is the 0-based
// byte offset of the offending byte (or of the end of the input); Item is
// the index of the item being read, or -1 outside the items. When Approx is
// set, the exact position could not be recovered (an item larger than the
// look-back window) and Offset is where the value containing the error
// starts.
type SyntaxError struct {
	Ref    string
	Offset int64
	Item   int64
	Approx bool
	Msg    string
}

func (e *SyntaxError) Error() string {
	where := fmt.Sprintf("at byte %d", e.Offset)
	if e.Approx {
		where = fmt.Sprintf("in the value starting at byte %d", e.Offset)
	}
	s := fmt.Sprintf("input %s: malformed JSON %s: %s", e.Ref, where, e.Msg)
	if e.Item >= 0 {
		s += fmt.Sprintf(" (in items[%d])", e.Item)
	}
	return s
}

// Is makes errors.Is(err, ErrMalformedJSON) true.
func (e *SyntaxError) Is(target error) bool { return target == ErrMalformedJSON }

// kindError is a message that wraps a sentinel without repeating its text,
// and optionally a cause whose text it does include.
type kindError struct {
	kind  error
	msg   string
	cause error
}

func (e *kindError) Error() string {
	if e.cause != nil {
		return e.msg + ": " + e.cause.Error()
	}
	return e.msg
}

func (e *kindError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.kind, e.cause}
	}
	return []error{e.kind}
}

func errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

func wrapf(kind, cause error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...), cause: cause}
}
