package itemrun

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/shell"
)

// A step with commit_required (Prodigy's) must leave a new commit in its
// directory when that is a git checkout: HEAD is read before the step and
// after it succeeds, and a HEAD that did not move fails the step (under
// its retry_config, as any failure). Where the directory is no git
// checkout after the step, nothing is checked (`fleetctl validate` warns
// that each item's directory starts empty).

// gitTimeout bounds each git call.
const gitTimeout = 30 * time.Second

// gitHead returns the commit HEAD names in dir, and whether dir is a git
// checkout at all ("" and true for a checkout with no commit yet).
func gitHead(ctx context.Context, dir string, env []string) (head string, checkout bool) {
	ctx, cancel := context.WithTimeout(ctx, gitTimeout)
	defer cancel()
	inside := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--is-inside-work-tree")
	inside.Env = env
	if out, err := shell.Output(inside); err != nil || strings.TrimSpace(string(out)) != "true" {
		return "", false
	}
	rev := exec.CommandContext(ctx, "git", "-C", dir, "rev-parse", "--verify", "-q", "HEAD")
	rev.Env = env
	out, err := shell.Output(rev) // a subreaper does not take its exit status
	if err != nil {
		return "", true
	}
	return strings.TrimSpace(string(out)), true
}

// errNoCommit is the failure of a commit_required step that made none.
var errNoCommit = errors.New("commit_required: the step made no new commit")

// commitMade checks, after a commit_required step succeeded, that HEAD in
// dir moved from before.
func commitMade(ctx context.Context, dir string, env []string, before string) *retry.Failure {
	after, checkout := gitHead(ctx, dir, env)
	if !checkout || after != "" && after != before {
		return nil
	}
	return &retry.Failure{Err: fmt.Errorf("%w in %s (HEAD is still %s)", errNoCommit, dir, shortHead(before))}
}

func shortHead(h string) string {
	if h == "" {
		return "unborn"
	}
	return h[:min(len(h), 12)]
}
