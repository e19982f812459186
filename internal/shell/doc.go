// Package shell runs the shell steps of a job template safely.
//
// [Compile] reads a parsed template (wire.ParseTemplate) with a real
// shell parser (mvdan.cc/sh), as bash and as POSIX sh, to find where each
// ${...} reference stands, and [Script.Expand] then writes every value as
// one literal shell word, whatever the item holds: an item value of
//
//	'; rm -rf / #    $(touch /tmp/pwned)    `id`    a "quoted" word    two\nlines
//
// reaches the command as exactly that one argument. A bare reference is
// written with [Quote], in POSIX single quotes; one inside "..." or '...'
// is escaped for that place instead, and one in a comment is left as
// written. There is no need to put quotes around a reference to make it
// one word: it already is one.
//
// Quoting only keeps a value literal where the shell does not evaluate it.
// Bash evaluates arithmetic recursively — in $((...)), ((...)), let, array
// subscripts, [[ ... -gt ... ]], declare -i — and runs any $(...) in a
// value such as a[$(cmd)] there, quoted or not; it evaluates the subscript
// of a variable name given to unset, read, printf -v, declare, [[ -v ]];
// eval, trap and alias run their arguments. Compile refuses a reference in any of
// those places, and one assigned to a variable that the script then uses
// there (n=${item.n}; echo $((n + 1))), with [ErrUnsafePosition]; also
// inside `...`, a quoted here-document, ${...}, after a backslash and
// wherever bash and POSIX sh read the script differently. In the text of an
// unquoted here-document (cat <<EOF) a reference becomes the expansion of
// a variable holding its value ([Script.ExpandEnv]), which the shell does
// not read as shell text. [Validate] finds those at
// submission time. ${attempt} and the ${map.*} counts are numbers the
// agent makes, allowed in arithmetic.
//
// Values stay literal only as far as the template takes them: a script that
// re-evaluates its arguments (sh -c "$1", xargs sh -c, a command that
// evaluates what it reads) runs them, and a value copied through a command
// substitution or read is not followed (n=$(echo ${item.n}); $((n)) is not
// refused). A value starting with "-" is an option to most commands: put
// "--" before it (rm -- ${item.path}).
//
// [Run] runs a script in a process group of its own with exactly the
// environment it is given, a timeout and context cancellation that kill the
// whole group (SIGTERM, then SIGKILL after a grace period), bounded stdout
// and stderr tails, and an optional heartbeat while the process runs. When
// the process is a child subreaper ([EnableSubreaper]), Run also kills and
// reaps what the step left outside its group (setsid, double forks).
// [Vars.Environ] builds ITEM_JSON, ITEM_ID, JOB_ID and ATTEMPT for the
// step's environment, [EnvFilter] the variables of the agent a step may see.
//
//	s, err := shell.Compile(t) // once per template
//	script, err := s.Expand(vars)
//	res := shell.Run(ctx, shell.Command{Script: script, Env: env, Timeout: 30 * time.Second})
//	if res.Failed() { return res.AsError() } // "exit status 3: <last stderr line>"
//
// Run needs Linux; Compile, Expand and Quote work everywhere.
package shell
