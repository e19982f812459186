package auth_test

import (
	"fmt"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// What a submitter may do in the fleet under the default prefix: submit
// (API or durable intake), read status, upload inputs, and read its own
// replies (auth.UserKey stands for its public nkey).
func ExampleRolePermissions() {
	p, err := auth.RolePermissions(auth.RoleSubmitter, messages.MustNames("fleet"), "")
	if err != nil {
		panic(err)
	}
	for _, s := range p.Publish.Allow[:5] {
		fmt.Println("publish", s)
	}
	fmt.Println("subscribe", p.Subscribe.Allow)
	// Output:
	// publish fleet.api.jobs.submit
	// publish fleet.api.jobs.status
	// publish fleet.api.jobs.list
	// publish fleet.jobs.submit
	// publish $O.fleet_uploads.C.>
	// subscribe [_INBOX.USERKEY.> fleet.events.*.completed fleet.events.*.rejected]
}
