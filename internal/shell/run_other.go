//go:build !linux

package shell

import (
	"context"
	"errors"
	"fmt"
)

// Run is only implemented on Linux, where a process can be waited for
// without being reaped (waitid WNOWAIT), which makes killing its process
// group free of pid-reuse races. Elsewhere it returns a Result whose Err
// wraps ErrStart and errors.ErrUnsupported.
func Run(ctx context.Context, c Command) Result {
	return Result{ExitCode: -1, Err: fmt.Errorf("%w: %w: shell steps need Linux", ErrStart, errors.ErrUnsupported)}
}
