package jobrun

import (
	"fmt"

	"github.com/jetfleet/jetfleet/internal/wire"
)

// signer returns the function that signs a work item for a pool with
// Config.WorkSigner, or nil when the coordinator signs nothing.
func (c *Coordinator) signer() func(pool string, wi *wire.WorkItem) error {
	s := c.cfg.WorkSigner
	if s == nil {
		return nil
	}
	return func(pool string, wi *wire.WorkItem) error {
		sig, err := s.Sign(wi.SignedBytes(pool))
		if err != nil {
			return fmt.Errorf("signing item %d of %s: %w", wi.Index, wi.JobID, err)
		}
		wi.Sig = wire.EncodeSig(sig)
		return nil
	}
}
