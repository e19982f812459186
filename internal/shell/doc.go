// Package shell runs the shell steps of a job template safely.
//
// [Expand] turns a parsed template (messages.ParseTemplate) into a script
// for /bin/sh -c in which every ${...} reference is one literal shell word,
// whatever the item holds: an item value of
//
//	'; rm -rf / #    $(touch /tmp/pwned)    `id`    a "quoted" word    two\nlines
//
// reaches the command as exactly that one argument. A bare reference is
// written with [Quote], in POSIX single quotes. Expand follows the shell's quoting through the
// template, so a reference inside "..." or '...' is escaped for that place
// instead, and one in a comment is left as written. Where no quoting can be
// safe — inside `...`, a here-document, ${...} or $((...)), right after a
// backslash, after bash's $'...', or after a case statement inside
// $(...) — the reference is refused with [ErrUnsafePosition]; [Validate]
// finds those at submission time. There is no need to put quotes around a
// reference to make it one word: it already is one.
//
// Values stay literal only as far as the template takes them: a script that
// re-evaluates its arguments (eval, sh -c "$1", xargs sh -c) runs them.
//
// [Run] runs a script in a process group of its own with a timeout and
// context cancellation that kill the whole group (SIGTERM, then SIGKILL
// after a grace period), bounded stdout and stderr tails, and an optional
// heartbeat while the process runs. [Vars.Environ] builds ITEM_JSON,
// ITEM_ID, JOB_ID and ATTEMPT for the step's environment.
//
//	t, err := messages.ParseTemplate(step.Shell)
//	script, err := shell.Expand(t, vars)
//	res := shell.Run(ctx, shell.Command{Script: script, Env: vars.Environ(), Timeout: 30 * time.Second})
//	if res.Failed() { return res.AsError() } // "exit status 3: <last stderr line>"
//
// Run needs Linux; Expand and Quote work everywhere.
package shell
