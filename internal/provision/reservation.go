package provision

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrDLQReservation is why a pool's dead-letter stream was not made: the
// servers cannot reserve its quota. JetStream reserves a stream's MaxBytes
// of the max_file_store (or max_memory_store) of every node that stores
// it, when the stream is made, whatever it holds; each pool's
// FLEET_DLQ_<pool> reserves DLQMaxBytes so (docs/dlq.md, "Each pool's
// quota is reserved").
var ErrDLQReservation = errors.New("provision: the servers cannot reserve the pool's dead-letter quota")

// JetStream's refusals of a stream that does not fit (nats-server
// errors.json): a single server's "insufficient storage resources
// available", a cluster's "no suitable peers for placement" (its
// description then says "insufficient storage"), and the account's limits.
const (
	errCodeAccountResources = 10002
	errCodeNoPeers          = 10005
	errCodeStorageExceeded  = 10047
	errCodeMemoryExceeded   = 10028
)

// noRoomToReserve reports whether err is JetStream refusing a stream for
// want of room to reserve its MaxBytes.
func noRoomToReserve(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeStorageExceeded, errCodeMemoryExceeded, errCodeAccountResources:
		return true
	case errCodeNoPeers:
		return strings.Contains(apiErr.Description, "insufficient storage")
	}
	return false
}

// reservationErr is err, the refusal of pool's dead-letter stream, said
// the way an operator can act on: when the servers have no room to reserve
// the quota it names the quota, what the account's streams reserve
// already (JetStream's account info) and the three ways out. Any other err
// is returned as it is.
func reservationErr(ctx context.Context, js jetstream.JetStream, pool string, c Config, err error) error {
	if !noRoomToReserve(err) || c.DLQMaxBytes <= 0 {
		return err
	}
	reserved := "an unknown amount"
	ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if info, ierr := js.AccountInfo(ictx); ierr == nil {
		// The account's streams, each counted once (as every node that
		// stores a copy reserves it).
		res := info.ReservedStore
		if c.Memory {
			res = info.ReservedMemory
		}
		reserved = sizeText(int64(res))
		if lim := info.Limits.MaxStore; lim >= 0 && !c.Memory {
			reserved += " of the account's " + sizeText(lim)
		}
	}
	store := "max_file_store"
	if c.Memory {
		store = "max_memory_store"
	}
	return fmt.Errorf("%w: FLEET_DLQ_%s reserves its quota, DLQMaxBytes = %s, of each node's %s up front, and the account's streams reserve %s already (each pool's dead-letter stream its quota): raise the servers' %s, lower the quota (the coordinator's --dlq-max-bytes), or use fewer pools (--max-pools): %w",
		ErrDLQReservation, pool, sizeText(c.DLQMaxBytes), store, reserved, store, err)
}

// sizeText writes n bytes the way the docs do: 16 MiB, 1.5 GiB, 700 B.
func sizeText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + []string{"KiB", "MiB", "GiB", "TiB", "PiB"}[exp]
}
