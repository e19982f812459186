package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jetfleet/jetfleet/internal/jsonscan"
)

// MaxCaptureBytes bounds the captured variables of one item, all of them
// together, in their JSON form: they travel in the item's state (the
// fleet_items KV), which has to fit in one message. A capture that would
// pass the bound fails its step; no value is ever truncated.
const MaxCaptureBytes = 64 << 10

// Capture formats (a step's capture_format).
const (
	CaptureString  = "string"
	CaptureNumber  = "number"
	CaptureJSON    = "json"
	CaptureLines   = "lines"
	CaptureBoolean = "boolean"
)

// CaptureFormats are the valid capture_format values.
var CaptureFormats = []string{CaptureString, CaptureNumber, CaptureJSON, CaptureLines, CaptureBoolean}

// Capture is a variable a step captured (Prodigy's capture:): its value,
// and the streams capture_streams asked for.
type Capture struct {
	// Value is the step's stdout read in the capture's format, as JSON.
	Value    json.RawMessage `json:"value,omitempty"`
	Stderr   *string         `json:"stderr,omitempty"`
	ExitCode *int            `json:"exit_code,omitempty"`
	Success  *bool           `json:"success,omitempty"`
	// Duration is the step's run time in seconds.
	Duration *float64 `json:"duration,omitempty"`
}

// CaptureValue reads a step's stdout in format (empty: string), as
// Prodigy does: string is the text without its trailing newlines; number
// a float; json the JSON document; lines an array of the lines; boolean
// true or false, or else whether the step succeeded.
func CaptureValue(format, stdout string, success bool) (json.RawMessage, error) {
	var v any
	switch format {
	case "", CaptureString:
		v = strings.TrimRight(stdout, "\r\n")
	case CaptureNumber:
		s := strings.TrimSpace(stdout)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("capture_format number: the output %q is not a number", clip(s))
		}
		v = f
	case CaptureJSON:
		b := bytes.TrimSpace([]byte(stdout))
		if !jsonscan.Valid(b) {
			return nil, fmt.Errorf("capture_format json: the output %q is not a JSON document", clip(string(b)))
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return nil, fmt.Errorf("capture_format json: %w", err)
		}
		return buf.Bytes(), nil
	case CaptureLines:
		lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimSuffix(l, "\r")
		}
		if stdout == "" {
			lines = []string{}
		}
		v = lines
	case CaptureBoolean:
		switch strings.TrimSpace(stdout) {
		case "true":
			v = true
		case "false":
			v = false
		default:
			v = success
		}
	default:
		return nil, fmt.Errorf("unknown capture_format %q", format)
	}
	return json.Marshal(v)
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// Lookup resolves a path into the capture (without its name): empty is
// the value; stderr, exit_code, success and duration are those streams
// when they were captured; output is the value too, unless the value is
// an object (then its field); anything else is a path into the value.
func (c *Capture) Lookup(path []string) (string, error) {
	if len(path) == 1 {
		switch path[0] {
		case "stderr":
			if c.Stderr != nil {
				return *c.Stderr, nil
			}
		case "exit_code":
			if c.ExitCode != nil {
				return strconv.Itoa(*c.ExitCode), nil
			}
		case "success":
			if c.Success != nil {
				return strconv.FormatBool(*c.Success), nil
			}
		case "duration":
			if c.Duration != nil {
				return strconv.FormatFloat(*c.Duration, 'f', -1, 64), nil
			}
		}
	}
	if c.Value == nil {
		return "", fmt.Errorf("the capture holds no value (capture_streams.stdout is false)")
	}
	if len(path) == 1 && path[0] == "output" && !bytes.HasPrefix(c.Value, []byte("{")) {
		return rawText(c.Value), nil // ${NAME.output}: the value (Prodigy's step id)
	}
	return LookupItemField(c.Value, path)
}

// JSONValue is the capture's value decoded for a condition (when:),
// numbers as json.Number; nil when it holds none.
func (c *Capture) JSONValue() any {
	var v any
	if c.Value != nil {
		d := json.NewDecoder(bytes.NewReader(c.Value))
		d.UseNumber()
		_ = d.Decode(&v)
	}
	return v
}

// Size is the capture's size in its JSON form.
func (c *Capture) Size() int {
	b, _ := json.Marshal(c)
	return len(b)
}

// IsOutputCapture reports a capture into shell.output or last.output,
// Prodigy's default variable: the step's output is read there anyway.
func IsOutputCapture(name string) bool {
	return name == RefShell+".output" || name == RefLast+".output"
}
