package shell

import "errors"

// Errors of template expansion. A *RefError wraps one of them.
var (
	// ErrItemField: an ${item...} reference names a field the item lacks, or
	// the item is not valid JSON.
	ErrItemField = errors.New("shell: item field not found")
	// ErrEnvUnset: an ${env.NAME} reference names an unset variable.
	ErrEnvUnset = errors.New("shell: environment variable not set")
	// ErrNoMap: a ${map.*} reference outside a reduce step.
	ErrNoMap = errors.New("shell: map values are only available in reduce steps")
	// ErrMapResultsSize: ${map.results_json} (Prodigy's ${map.results}) is
	// over MaxMapResultsJSON.
	ErrMapResultsSize = errors.New("shell: the map results are too large to paste into a command")
	// ErrUnsafePosition: a reference stands where no quoting can keep its
	// value a literal: where bash evaluates it (arithmetic, a variable
	// name, eval), or inside `...`, a here-document, ${...}, bash's $'...',
	// after a backslash, ... ([Compile] has the list).
	ErrUnsafePosition = errors.New("shell: reference cannot be quoted safely here")
	// ErrSyntax: a template with references does not parse as a shell
	// script, so where they stand cannot be known.
	ErrSyntax = errors.New("shell: the command does not parse as a shell script")
	// ErrNUL: a value holds a NUL byte, which no shell argument, script or
	// environment variable can carry.
	ErrNUL = errors.New("shell: value contains a NUL byte")
	// ErrUnknownRef: a reference outside the template grammar (only a
	// Template built by hand, not by wire.ParseTemplate, has one).
	ErrUnknownRef = errors.New("shell: unknown reference")
)

// ErrStepEnv: an entry of a step environment allow-list ([NewEnvFilter]) is
// not a variable name or prefix, or names the agent's reserved variables.
var ErrStepEnv = errors.New("shell: step environment")

// Errors of [Run]. [Result.AsError] returns a *RunError matching one of them.
var (
	// ErrStart: the process could not be started (bad directory, NUL byte in
	// the script or environment, unsupported platform, ...).
	ErrStart = errors.New("shell: cannot start")
	// ErrTimeout: the step ran longer than its timeout and was killed.
	ErrTimeout = errors.New("shell: timeout")
	// ErrCancelled: the caller's context ended while the step ran.
	ErrCancelled = errors.New("shell: cancelled")
	// ErrExit: the process exited with a non-zero status or died of a signal
	// it was not sent by Run.
	ErrExit = errors.New("shell: command failed")
)
