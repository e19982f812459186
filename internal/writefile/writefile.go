// Package writefile is the write_file step (docs/job-spec.md): the checks
// pkg/jobspec makes at submission and the write an agent makes, without a
// shell, inside the item's directory.
package writefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Formats of the content: text is written as it is, json and yaml are
// parsed first (invalid content fails the step, nothing is written) and
// written indented.
const (
	FormatText = "text"
	FormatJSON = "json"
	FormatYAML = "yaml"
)

// Formats lists the formats, for messages.
var Formats = []string{FormatText, FormatJSON, FormatYAML}

// MaxBytes bounds the content written, after its variables are expanded
// and it is formatted: over it the step fails and nothing is written.
const MaxBytes = 1 << 20

// DefaultMode is the file's mode when mode is unset.
const DefaultMode fs.FileMode = 0o644

// CheckPath refuses a path that cannot stay inside the item's directory:
// an absolute one, or one whose ".." leads out. At submission p is the
// path as written (its ${...} references left in); at run time, expanded.
func CheckPath(p string) error {
	switch {
	case strings.TrimSpace(p) == "":
		return errors.New("must not be empty")
	case strings.IndexByte(p, 0) >= 0:
		return errors.New("holds a NUL byte")
	case path.IsAbs(p) || filepath.IsAbs(p) || filepath.VolumeName(p) != "":
		return fmt.Errorf("%q is absolute: a file is written inside the item's directory (give a path relative to it)", p)
	}
	c := path.Clean(strings.ReplaceAll(p, `\`, "/"))
	if c == ".." || strings.HasPrefix(c, "../") {
		return fmt.Errorf("%q leads out of the item's directory (..)", p)
	}
	if c == "." {
		return fmt.Errorf("%q names the item's directory, not a file", p)
	}
	return nil
}

// ParseMode reads an octal mode, "0644" or "644"; unset is DefaultMode.
// Only the permission bits are allowed.
func ParseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return DefaultMode, nil
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "0o"), 8, 32)
	if err != nil || n > 0o777 {
		return 0, fmt.Errorf("%q is not an octal file mode of permission bits (such as \"0644\")", s)
	}
	return fs.FileMode(n), nil
}

// CheckFormat refuses an unknown format; "" is text.
func CheckFormat(f string) error {
	switch f {
	case "", FormatText, FormatJSON, FormatYAML:
		return nil
	}
	return fmt.Errorf("unknown format %q (use %s)", f, strings.Join(Formats, ", "))
}

// Render checks content in format f and returns the bytes to write: json
// indented by two spaces, yaml re-encoded, text as it is. The error says
// what is wrong with the content, for the field "content".
func Render(f, content string) ([]byte, error) {
	var out []byte
	switch f {
	case "", FormatText:
		out = []byte(content)
	case FormatJSON:
		if !json.Valid([]byte(content)) {
			var v any
			err := json.Unmarshal([]byte(content), &v)
			return nil, fmt.Errorf("content is not valid JSON (format: json): %v", err)
		}
		var b bytes.Buffer
		if err := json.Indent(&b, []byte(content), "", "  "); err != nil {
			return nil, fmt.Errorf("content is not valid JSON (format: json): %v", err)
		}
		out = append(b.Bytes(), '\n')
	case FormatYAML:
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(content), &n); err != nil {
			return nil, fmt.Errorf("content is not valid YAML (format: yaml): %v", err)
		}
		var b bytes.Buffer
		e := yaml.NewEncoder(&b)
		e.SetIndent(2)
		if err := e.Encode(&n); err != nil {
			return nil, fmt.Errorf("content is not valid YAML (format: yaml): %v", err)
		}
		out = b.Bytes()
	default:
		return nil, CheckFormat(f)
	}
	if len(out) > MaxBytes {
		return nil, fmt.Errorf("content is %d bytes, over write_file's bound of %d", len(out), MaxBytes)
	}
	return out, nil
}

// Write writes data to rel inside dir with mode, creating rel's parent
// directories when createDirs is set. It goes through an os.Root opened
// on dir, so neither ".." nor a symbolic link (one an earlier step made)
// takes it out of dir.
func Write(dir, rel string, data []byte, mode fs.FileMode, createDirs bool) error {
	if err := CheckPath(rel); err != nil {
		return err
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	rel = filepath.Clean(filepath.FromSlash(rel))
	if parent := filepath.Dir(rel); createDirs && parent != "." {
		if err := r.MkdirAll(parent, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", parent, err)
		}
	}
	f, err := r.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && !createDirs {
			return fmt.Errorf("%w (create_dirs: true makes its directories)", err)
		}
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Chmod(mode) // an existing file keeps its mode otherwise; the umask is not applied either
	}
	return errors.Join(err, f.Close())
}
