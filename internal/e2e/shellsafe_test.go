package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/agent"
	"github.com/jetfleet/jetfleet/pkg/coordinator"
	"github.com/jetfleet/jetfleet/pkg/fleettest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// TestUnsafeShellStepsRefused: a shell step where bash would evaluate an
// item's value (arithmetic), and a job env that would override ITEM_ID, are
// refused at submission with their field paths, on the API and on the
// durable intake; an ordinary job submitted afterwards succeeds.
func TestUnsafeShellStepsRefused(t *testing.T) {
	srv := fleettest.RunServer(t)
	startCoordinator(t, srv.URL(), coordinator.Config{})
	startAgent(t, srv.URL(), agent.Config{Name: "a1"}, nil)
	cl := client(t, srv)
	ctx := context.Background()

	const unsafe = `{"id": "unsafe", "items": [{"id": "a", "n": "a[$(touch /tmp/pwned)]"}], "env": {"ITEM_ID": "forged"},
		"agent_template": [{"shell": "echo ok"}, {"shell": "[[ ${item.n} -gt 5 ]] && echo big"}],
		"error_policy": {"on_item_failure": {"custom": {"shell": "n=${item.n}; echo $((n + 1))"}}}}`
	_, err := cl.Submit(ctx, []byte(unsafe))
	var ae *messages.APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, messages.CodeInvalid, ae.Code)
	byField := map[string]string{}
	for _, p := range ae.Problems {
		byField[p.Field] = p.Message
	}
	require.Contains(t, byField["agent_template[1].shell"], "${item.n}: cannot be quoted safely: bash evaluates it as arithmetic in [[ ... -gt ... ]]")
	require.Contains(t, byField["error_policy.on_item_failure.custom.shell"], "${item.n}: cannot be quoted safely: it is assigned to n, which is used in $((...))")
	require.Contains(t, byField["env.ITEM_ID"], "reserved")
	require.Len(t, byField, 3, "%v", ae.Problems)

	// The durable intake applies the same checks.
	names := messages.MustNames("")
	_, err = srv.JS().Publish(ctx, names.JobsSubmitSubject(), []byte(strings.Replace(unsafe, `"unsafe"`, `"unsafe-durable"`, 1)))
	require.NoError(t, err)
	fleettest.WaitFor(t, 20*time.Second, func() error {
		st, err := cl.Status(ctx, "unsafe-durable")
		if err != nil {
			return err
		}
		if st.State != messages.StateRejected {
			return fmt.Errorf("state %s", st.State)
		}
		fields := map[string]bool{}
		for _, p := range st.Problems {
			fields[p.Field] = true
		}
		require.Equal(t, map[string]bool{"agent_template[1].shell": true, "error_policy.on_item_failure.custom.shell": true, "env.ITEM_ID": true}, fields)
		return nil
	})

	// The safe form the refusal advises runs, and refuses the hostile value.
	id := submit(t, cl, `{"items": [{"id": "num", "n": "41"}, {"id": "evil", "n": "a[$(touch /tmp/pwned)]"}],
		"agent_template": [{"shell": "n=$(printf '%s\\n' ${item.n} | grep -xE -- '-?[0-9]+') || exit 3; [ \"$n\" -gt 5 ] && echo $((n + 1))",
			"retry_config": {"attempts": 1}}]}`)
	st := waitJob(t, cl, id, 30*time.Second)
	require.EqualValues(t, 1, st.Succeeded, "%+v", st)
	require.EqualValues(t, 1, st.DeadLettered, "%+v", st)
}
