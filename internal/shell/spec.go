package shell

import (
	"errors"

	"github.com/jetfleet/jetfleet/internal/wire"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// CheckSpec reports every reference of spec's shell commands (steps,
// fallbacks, a custom on_item_failure step) that stands where no quoting
// is safe, and every command with references that does not parse (see
// [Compile]), each with the command's field path. A command that is not a
// valid template is left to the spec's own validation. Package jobspec
// runs it on every spec it reads.
func CheckSpec(spec *messages.JobSpec) []messages.FieldError {
	var out []messages.FieldError
	for _, c := range spec.ShellCommands() {
		t, err := wire.ParseTemplate(c.Command)
		if err != nil {
			continue
		}
		err = Validate(t)
		if err == nil {
			continue
		}
		errs := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok && !errors.Is(err, ErrSyntax) {
			errs = j.Unwrap()
		}
		for _, e := range errs {
			out = append(out, messages.FieldError{Field: c.Field, Message: e.Error()})
		}
	}
	return out
}
