package jobrun

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	fleettest "github.com/jetfleet/jetfleet/internal/natstest"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

// An http step whose URL writes out a loopback, link-local (cloud
// metadata), unspecified or multicast host is refused at submission, with
// the field; with an allow-list, any host outside it is, and what it lists
// is accepted. Names other than localhost wait for the agent's check.
func TestHTTPStepTargetsRefusedAtSubmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	spec := func(id, url string, where string) []byte {
		step := `{"handler": "http", "with": {"url": "` + url + `"}}`
		switch where {
		case "reduce":
			return []byte(`{"id": "` + id + `", "items": [{"id": "a"}], "agent_template": [{"handler": "noop"}], "reduce": [` + step + `]}`)
		case "custom":
			return []byte(`{"id": "` + id + `", "items": [{"id": "a"}], "agent_template": [{"handler": "noop"}], "error_policy": {"on_item_failure": {"custom": ` + step + `}}}`)
		}
		return []byte(`{"id": "` + id + `", "items": [{"id": "a"}], "agent_template": [{"handler": "noop"}, ` + step + `]}`)
	}
	for _, tt := range []struct {
		name   string
		allow  []string
		url    string
		where  string
		field  string // "" = accepted
		reason string
	}{
		{name: "metadata", url: "http://169.254.169.254/latest/meta-data/", field: "agent_template[1].with.url", reason: "link-local"},
		{name: "monitoring port", url: "http://127.0.0.1:8222/varz", field: "agent_template[1].with.url", reason: "loopback"},
		{name: "localhost", url: "http://localhost:8222/${item.id}", field: "agent_template[1].with.url", reason: "loopback"},
		{name: "ipv6 loopback", url: "http://[::1]/x", field: "agent_template[1].with.url", reason: "loopback"},
		{name: "unspecified", url: "http://0.0.0.0:4222/", field: "agent_template[1].with.url", reason: "unspecified"},
		{name: "reduce step", url: "http://127.0.0.1/", where: "reduce", field: "reduce[0].with.url", reason: "loopback"},
		{name: "custom failure step", url: "http://169.254.169.254/", where: "custom", field: "error_policy.on_item_failure.custom.with.url", reason: "link-local"},
		{name: "a name", url: "https://api.example.invalid/${item.id}"},
		{name: "a public address", url: "http://192.0.2.10/x"},
		{name: "allowed loopback", allow: []string{"127.0.0.0/8"}, url: "http://127.0.0.1:9000/x"},
		{name: "allowed localhost", allow: []string{"127.0.0.0/8"}, url: "http://localhost:9000/x"},
		{name: "outside the list", allow: []string{"127.0.0.0/8"}, url: "http://192.0.2.10/x", field: "agent_template[1].with.url", reason: "allow-list"},
		{name: "metadata outside the list", allow: []string{"10.0.0.0/8"}, url: "http://169.254.169.254/", field: "agent_template[1].with.url", reason: "allow-list"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := fleettest.RunServer(t)
			_, p := startCoord(t, srv, Config{HTTPAllow: tt.allow})
			defer p.stop(t)
			cl, err := NewClient(srv.Conn(), "")
			require.NoError(t, err)
			_, err = cl.Submit(ctx, spec("j", tt.url, tt.where))
			if tt.field == "" {
				require.NoError(t, err)
				return
			}
			var apiErr *messages.APIError
			require.True(t, errors.As(err, &apiErr), "%v", err)
			require.Equal(t, tt.field, apiErr.Field, apiErr.Message)
			require.Contains(t, apiErr.Message, tt.reason)
		})
	}
}
