//go:build !linux

package shell

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
)

// EnableSubreaper needs Linux; elsewhere it returns an error wrapping
// errors.ErrUnsupported.
func EnableSubreaper(mode ReapMode) error {
	return fmt.Errorf("shell: child subreaper: %w", errors.ErrUnsupported)
}

// Reap returns at once outside Linux.
func Reap(ctx context.Context) {}

// Subreaping is false outside Linux.
func Subreaping() bool { return false }

// Output is cmd.Output outside Linux, where no subreaper reaps.
func Output(cmd *exec.Cmd) ([]byte, error) { return cmd.Output() }
