package secret

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

var (
	// ErrNotAllowed is wrapped when the agent does not let jobs read a
	// variable or a file.
	ErrNotAllowed = errors.New("secret: not allowed on this agent")
	// ErrNotFound is wrapped when the variable is not set.
	ErrNotFound = errors.New("secret: not found")
)

// MaxFileBytes bounds a file the agent reads for a job (a secret, an env
// file).
const MaxFileBytes = 1 << 20

// Source is where an agent reads what a job asks of it: the variables of
// its environment that jobs' secrets may read, and the directories whose
// files their env files and file secrets may name. It is a plain value.
type Source struct {
	// Env holds the variables secrets may read (already selected by the
	// agent's --secret-env).
	Env map[string]string
	// Dirs are the directories files are read under; a relative path is
	// read under the first. None: no file can be read.
	Dirs []string
}

// Lookup reads an environment secret.
func (s Source) Lookup(name string) (string, error) {
	v, ok := s.Env[name]
	if !ok {
		return "", fmt.Errorf("%w: the agent's environment variable %s is not set, or not one its --secret-env lets jobs read", ErrNotFound, name)
	}
	return v, nil
}

// ReadFile reads a file under one of Dirs, through an os.Root on it (a
// symbolic link does not lead out of it). A path starting with ~/ is under
// the agent's home directory. The error wraps fs.ErrNotExist when the file
// is not there, ErrNotAllowed when it is outside every directory.
func (s Source) ReadFile(path string) ([]byte, error) {
	if rest, ok := strings.CutPrefix(path, "~/"); ok {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		path = filepath.Join(home, rest)
	}
	if len(s.Dirs) == 0 {
		return nil, fmt.Errorf("%w: %s: the agent reads no files for jobs (no --secret-dir)", ErrNotAllowed, path)
	}
	dir, rel := s.Dirs[0], path
	if filepath.IsAbs(path) {
		dir = ""
		for _, d := range s.Dirs {
			r, err := filepath.Rel(d, path)
			if err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				dir, rel = d, r
				break
			}
		}
		if dir == "" {
			return nil, fmt.Errorf("%w: %s is outside the agent's --secret-dir (%s)", ErrNotAllowed, path, strings.Join(s.Dirs, ", "))
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxFileBytes)
	}
	return data, nil
}
