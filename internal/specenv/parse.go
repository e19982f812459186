package specenv

import (
	"errors"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// parser is pkg/jobspec's reader, registered from its init (this package
// cannot import it: it imports this one).
var parser func(data []byte, profile string) (*messages.JobSpec, error)

// RegisterParser is called once, by pkg/jobspec's init.
func RegisterParser(f func(data []byte, profile string) (*messages.JobSpec, error)) { parser = f }

// Parse reads a job spec document as jobspec.Parse does, with its profile
// set to profile (fleetctl run and submit --profile), over the document's
// own: the profile's values apply over env before anything reads them,
// the ${NAME} number fields among them. An unknown profile is a problem
// naming it.
func Parse(data []byte, profile string) (*messages.JobSpec, error) {
	if parser == nil {
		return nil, errors.New("specenv: no parser registered (import pkg/jobspec)")
	}
	return parser(data, profile)
}
