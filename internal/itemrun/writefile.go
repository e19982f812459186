package itemrun

import (
	"fmt"
	"io/fs"

	"github.com/jetfleet/jetfleet/internal/retry"
	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/internal/writefile"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// writeCmd is a compiled write_file step (docs/job-spec.md): no shell
// runs; the agent expands the templates as text and writes the file.
type writeCmd struct {
	path, content wire.Template
	format        string
	mode          fs.FileMode
	createDirs    bool
}

func compileWrite(w *messages.WriteFile) (*writeCmd, error) {
	c := &writeCmd{format: w.Format, createDirs: w.CreateDirs}
	var err error
	if c.path, err = wire.ParseTemplate(w.Path); err != nil {
		return nil, fmt.Errorf("write_file.path: %w", err)
	}
	if c.content, err = wire.ParseTemplate(w.Content); err != nil {
		return nil, fmt.Errorf("write_file.content: %w", err)
	}
	if err = writefile.CheckFormat(w.Format); err != nil {
		return nil, fmt.Errorf("write_file.format: %w", err)
	}
	if c.mode, err = writefile.ParseMode(w.Mode); err != nil {
		return nil, fmt.Errorf("write_file.mode: %w", err)
	}
	return c, nil
}

// runWrite runs a write_file step for the item: the path, expanded, must
// stay in the item's directory (a reduce's: the agent's WorkDir), and
// json or yaml content must parse, or the step fails for good and nothing
// is written. Its output is empty.
func (a *Agent) runWrite(it *item, c *writeCmd, attempt int) (_ string, f *retry.Failure) {
	defer func() { maskFailure(it.mask, f) }() // its content may hold a secret
	permanent := func(format string, args ...any) *retry.Failure {
		return &retry.Failure{Err: retry.Permanent(fmt.Errorf(format, args...))}
	}
	dir, err := a.stepDir(it, "")
	if err != nil {
		return "", &retry.Failure{Err: fmt.Errorf("the item's directory: %w", err)}
	}
	vars := a.shellVars(it, attempt)
	vars.ItemWorkdir = dir
	vars.LookupEnv = lookupIn(jobEnviron(it))
	p, err := vars.Text(c.path)
	if err != nil {
		return "", permanent("write_file.path: %w", err)
	}
	if err := writefile.CheckPath(p); err != nil {
		return "", permanent("write_file.path: %w", err)
	}
	content, err := vars.Text(c.content)
	if err != nil {
		return "", permanent("write_file.content: %w", err)
	}
	data, err := writefile.Render(c.format, content)
	if err != nil {
		return "", permanent("write_file.content: %w", err)
	}
	if err := writefile.Write(dir, p, data, c.mode, c.createDirs); err != nil {
		return "", &retry.Failure{Err: fmt.Errorf("write_file %s: %w", p, err)}
	}
	return "", nil
}
