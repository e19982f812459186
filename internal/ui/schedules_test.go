package ui

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

func TestSchedulesPage(t *testing.T) {
	f := startFleet(t, Config{})
	ctx := t.Context()
	b := f.browser(t)
	code, body, _ := b.get("/schedules")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "No schedules.")

	_, err := f.client.ScheduleAdd(ctx, messages.ScheduleSpec{Name: "hourly", Every: messages.Duration(time.Hour),
		Job: []byte(`{"items": [1], "agent_template": [{"handler": "noop"}]}`)})
	require.NoError(t, err)
	_, err = f.client.ScheduleAdd(ctx, messages.ScheduleSpec{Name: "nightly", Cron: "0 2 * * *", TZ: "Europe/Paris",
		Job: []byte(`{"items": [1], "agent_template": [{"handler": "noop"}]}`)})
	require.NoError(t, err)
	_, err = f.client.SchedulePause(ctx, "nightly")
	require.NoError(t, err)

	code, body, _ = b.get("/schedules")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `data-schedule="hourly"`)
	require.Contains(t, body, "every 1h")
	require.Contains(t, body, "cron 0 2 * * * (Europe/Paris)")
	require.Contains(t, body, `<span class="badge warn">paused</span>`)
	require.Contains(t, body, `<span class="badge run">active</span>`)
	require.Contains(t, body, `aria-current="page">Schedules`)
}
