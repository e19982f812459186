package expand

// A validating JSON scanner over a byte slice, without reflection or
// per-byte function calls: the fast path of the streaming reader
// (faststream.go). It accepts exactly what encoding/json accepts (FuzzScan
// checks it against json.Valid) and does not explain errors: the streaming
// reader hands anything unusual to the encoding/json reader (stream.go),
// which does.

// scanStatus is the outcome of a scan.
type scanStatus uint8

const (
	// scanOK: a complete value (or token) ends at the returned index.
	scanOK scanStatus = iota
	// scanMore: the bytes end inside the value; more input may complete it.
	scanMore
	// scanBad: the bytes are not JSON (or are nested deeper than
	// maxNesting).
	scanBad
)

// maxNesting is encoding/json's nesting limit; deeper values are left to
// it, so that its error is the one reported.
const maxNesting = 10000

// isSpace reports JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// scanValue scans the JSON value that starts at b[i] (no leading
// whitespace) and returns the index just past it. A number that reaches
// the end of b is scanMore: the next byte could extend it.
func scanValue(b []byte, i int) (int, scanStatus) {
	// stack holds the open containers: '{' or '['. Elements need no
	// separate state: after a value, the innermost container says whether
	// ',' ':' '}' or ']' may follow.
	var stackBuf [32]byte
	stack := stackBuf[:0]
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return i, scanMore
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxNesting {
				return i, scanBad
			}
			stack = append(stack, c)
			i = skipSpace(b, i+1)
			if i >= len(b) {
				return i, scanMore
			}
			if c == '[' && b[i] == ']' || c == '{' && b[i] == '}' {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				var st scanStatus
				if i, st = scanKey(b, i); st != scanOK {
					return i, st
				}
			}
			continue
		case c == '"':
			var st scanStatus
			if i, st = scanString(b, i); st != scanOK {
				return i, st
			}
		case c == '-' || '0' <= c && c <= '9':
			var st scanStatus
			if i, st = scanNumber(b, i); st != scanOK {
				return i, st
			}
		case c == 't':
			if i, st := scanLiteral(b, i, "true"); st != scanOK {
				return i, st
			}
			i += 4
		case c == 'f':
			if i, st := scanLiteral(b, i, "false"); st != scanOK {
				return i, st
			}
			i += 5
		case c == 'n':
			if i, st := scanLiteral(b, i, "null"); st != scanOK {
				return i, st
			}
			i += 4
		default:
			return i, scanBad
		}
		// A value ended at b[i-1]: close containers or move to the next
		// element.
		for {
			if len(stack) == 0 {
				return i, scanOK
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, scanMore
			}
			top := stack[len(stack)-1]
			switch c := b[i]; {
			case c == ',':
				i = skipSpace(b, i+1)
				if top == '{' {
					var st scanStatus
					if i, st = scanKey(b, i); st != scanOK {
						return i, st
					}
				}
			case c == ']' && top == '[' || c == '}' && top == '{':
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return i, scanBad
			}
			break
		}
	}
}

// scanKey scans an object key, the ':' after it and the whitespace before
// its value.
func scanKey(b []byte, i int) (int, scanStatus) {
	if i >= len(b) {
		return i, scanMore
	}
	if b[i] != '"' {
		return i, scanBad
	}
	i, st := scanString(b, i)
	if st != scanOK {
		return i, st
	}
	i = skipSpace(b, i)
	if i >= len(b) {
		return i, scanMore
	}
	if b[i] != ':' {
		return i, scanBad
	}
	i = skipSpace(b, i+1)
	if i >= len(b) {
		return i, scanMore
	}
	return i, scanOK
}

// scanString scans the string whose opening quote is b[i]. Like
// encoding/json it refuses control characters and bad escapes and lets
// any other byte through (invalid UTF-8 included).
func scanString(b []byte, i int) (int, scanStatus) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, scanOK
		case c < 0x20:
			return i, scanBad
		case c == '\\':
			i++
			if i >= len(b) {
				return i, scanMore
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				for k := 1; k <= 4; k++ {
					if i+k >= len(b) {
						return i + k, scanMore
					}
					if !isHex(b[i+k]) {
						return i + k, scanBad
					}
				}
				i += 4
			default:
				return i, scanBad
			}
		}
	}
	return i, scanMore
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. Its end
// is known only at a byte that cannot continue it: at the end of b it is
// scanMore.
func scanNumber(b []byte, i int) (int, scanStatus) {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) {
		return i, scanMore
	}
	switch {
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, scanBad
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) {
			return i, scanMore
		}
		if !isDigit(b[i]) {
			return i, scanBad
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) {
			return i, scanMore
		}
		if !isDigit(b[i]) {
			return i, scanBad
		}
		i = digits(b, i+1)
	}
	if i >= len(b) {
		return i, scanMore
	}
	return i, scanOK
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

// scanLiteral checks that lit starts at b[i].
func scanLiteral(b []byte, i int, lit string) (int, scanStatus) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(b) {
			return i + k, scanMore
		}
		if b[i+k] != lit[k] {
			return i + k, scanBad
		}
	}
	return i, scanOK
}
