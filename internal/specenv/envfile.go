package specenv

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ErrEnvFile is wrapped by the errors of ParseEnvFile.
var ErrEnvFile = errors.New("specenv: env file")

// MaxEnvFileBytes bounds an env file the agent reads.
const MaxEnvFileBytes = 1 << 20

// ParseEnvFile reads a .env file as Prodigy does: one NAME=value a line,
// name and value trimmed, a value's surrounding pair of quotes (" or ')
// removed; blank lines and lines starting with # skipped. A line without
// '=', an invalid name, or a value opened with a quote and not closed by
// the same one is an error naming the line (its value is never shown: an
// env file may hold secrets).
func ParseEnvFile(data []byte) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(strings.TrimPrefix(k, "export "))
		if !ok {
			return nil, fmt.Errorf("%w: line %d: expected NAME=value", ErrEnvFile, i+1)
		}
		if !ValidName(k) {
			return nil, fmt.Errorf("%w: line %d: %q is not a variable name", ErrEnvFile, i+1, k)
		}
		v = strings.TrimSpace(v)
		if v != "" && (v[0] == '"' || v[0] == '\'') {
			if len(v) < 2 || v[len(v)-1] != v[0] {
				return nil, fmt.Errorf("%w: line %d: %s's value opens a quote it does not close", ErrEnvFile, i+1, k)
			}
			v = v[1 : len(v)-1]
		}
		out[k] = v
	}
	return out, nil
}

// sensitiveName is Prodigy's rule for the names of variables whose values
// it masks in its output (password, token, api_key, secret, auth, ...).
var sensitiveName = regexp.MustCompile(`(?i)(password|passwd|pwd|token|api[_-]?key|secret|auth|bearer|private[_-]?key|ssh[_-]?key|access[_-]?key)`)

// Sensitive reports whether an env variable's name says it holds a secret
// (PASSWORD, API_KEY, AUTH_TOKEN, ...): its value is masked in a step's
// output as a secret's is, as Prodigy masks it.
func Sensitive(name string) bool { return sensitiveName.MatchString(name) }
