// Package jsonscan is a validating JSON scanner over byte slices, without
// reflection or a function call per byte: several times faster than
// encoding/json's scanner, which reads every item of every job twice in
// the coordinator and once in an agent.
//
// It accepts exactly what encoding/json accepts (FuzzValid checks it
// against json.Valid), including its nesting limit, and explains nothing:
// callers that must report an error hand the bytes to encoding/json.
// SkipString and SkipValue step over JSON already known to be valid,
// without checking it again.
package jsonscan

// Status is the outcome of a scan.
type Status uint8

const (
	// OK: a complete value (or token) ends at the returned index.
	OK Status = iota
	// More: the bytes end inside the value; more input may complete it.
	More
	// Bad: the bytes are not JSON (or are nested deeper than MaxNesting).
	Bad
)

// MaxNesting is encoding/json's nesting limit: deeper values are Bad.
const MaxNesting = 10000

// Valid reports whether b is one JSON value with optional whitespace
// around it, as json.Valid does.
func Valid(b []byte) bool {
	i := SkipSpace(b, 0)
	end, st := Value(b, i)
	if st == More && end == len(b) && i < len(b) && (b[i] == '-' || isDigit(b[i])) && isDigit(b[len(b)-1]) {
		// A number that ends with the input ends there.
		return true
	}
	return st == OK && SkipSpace(b, end) == len(b)
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// Value scans the JSON value that starts at b[i] (no leading
// whitespace) and returns the index just past it. A number that reaches
// the end of b is More: the next byte could extend it.
func Value(b []byte, i int) (int, Status) {
	// stack holds the open containers: '{' or '['. Elements need no
	// separate state: after a value, the innermost container says whether
	// ',' ':' '}' or ']' may follow.
	var stackBuf [32]byte
	stack := stackBuf[:0]
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return i, More
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) >= MaxNesting {
				return i, Bad
			}
			stack = append(stack, c)
			i = SkipSpace(b, i+1)
			if i >= len(b) {
				return i, More
			}
			if c == '[' && b[i] == ']' || c == '{' && b[i] == '}' {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				var st Status
				if i, st = Key(b, i); st != OK {
					return i, st
				}
			}
			continue
		case c == '"':
			var st Status
			if i, st = scanString(b, i); st != OK {
				return i, st
			}
		case c == '-' || '0' <= c && c <= '9':
			var st Status
			if i, st = scanNumber(b, i); st != OK {
				return i, st
			}
		case c == 't':
			if i, st := scanLiteral(b, i, "true"); st != OK {
				return i, st
			}
			i += 4
		case c == 'f':
			if i, st := scanLiteral(b, i, "false"); st != OK {
				return i, st
			}
			i += 5
		case c == 'n':
			if i, st := scanLiteral(b, i, "null"); st != OK {
				return i, st
			}
			i += 4
		default:
			return i, Bad
		}
		// A value ended at b[i-1]: close containers or move to the next
		// element.
		for {
			if len(stack) == 0 {
				return i, OK
			}
			i = SkipSpace(b, i)
			if i >= len(b) {
				return i, More
			}
			top := stack[len(stack)-1]
			switch c := b[i]; {
			case c == ',':
				i = SkipSpace(b, i+1)
				if top == '{' {
					var st Status
					if i, st = Key(b, i); st != OK {
						return i, st
					}
				}
			case c == ']' && top == '[' || c == '}' && top == '{':
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return i, Bad
			}
			break
		}
	}
}

// Key scans an object key, the ':' after it and the whitespace before
// its value.
func Key(b []byte, i int) (int, Status) {
	if i >= len(b) {
		return i, More
	}
	if b[i] != '"' {
		return i, Bad
	}
	i, st := scanString(b, i)
	if st != OK {
		return i, st
	}
	i = SkipSpace(b, i)
	if i >= len(b) {
		return i, More
	}
	if b[i] != ':' {
		return i, Bad
	}
	i = SkipSpace(b, i+1)
	if i >= len(b) {
		return i, More
	}
	return i, OK
}

// scanString scans the string whose opening quote is b[i]. Like
// encoding/json it refuses control characters and bad escapes and lets
// any other byte through (invalid UTF-8 included).
func scanString(b []byte, i int) (int, Status) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, OK
		case c < 0x20:
			return i, Bad
		case c == '\\':
			i++
			if i >= len(b) {
				return i, More
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if i+k >= len(b) {
						return i + k, More
					}
					if !isHex(b[i+k]) {
						return i + k, Bad
					}
				}
				i += 4
			default:
				return i, Bad
			}
		}
	}
	return i, More
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. Its end
// is known only at a byte that cannot continue it: at the end of b it is
// More.
func scanNumber(b []byte, i int) (int, Status) {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return i, More
	}
	switch {
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, Bad
	}
	var st Status
	if i < len(b) && b[i] == '.' {
		if i, st = someDigits(b, i+1); st != OK {
			return i, st
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, st = someDigits(b, i); st != OK {
			return i, st
		}
	}
	if i >= len(b) {
		return i, More
	}
	return i, OK
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// someDigits scans the one or more digits a fraction or an exponent
// needs.
func someDigits(b []byte, i int) (int, Status) {
	if i >= len(b) {
		return i, More
	}
	if !isDigit(b[i]) {
		return i, Bad
	}
	return digits(b, i+1), OK
}

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

// scanLiteral checks that lit starts at b[i].
func scanLiteral(b []byte, i int, lit string) (int, Status) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(b) {
			return i + k, More
		}
		if b[i+k] != lit[k] {
			return i + k, Bad
		}
	}
	return i, OK
}
