package shell

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEnvFilter(t *testing.T) {
	t.Parallel()
	environ := []string{
		"PATH=/bin", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "TZ=UTC", "TMPDIR=/tmp", "USER=agent",
		"NATS_URL=nats://u:hunter2@nats:4222", "NATS_NKEY=/secrets/agent.nk", "NATS_CREDS=/secrets/agent.creds",
		"NATS_PASSWORD=hunter2", "FLEET_POOL=gpu", "FLEET_STEP_ENV=AWS_*", "JETFLEET_STEP=x",
		"AWS_SECRET_ACCESS_KEY=s3cr3t", "AWS_REGION=eu-west-1", "GITHUB_TOKEN=ghp_x", "NO_EQUALS", "=weird",
	}
	tests := []struct {
		name         string
		extra        []string
		passReserved bool
		want         []string
		wantErr      string
	}{
		{name: "defaults", want: []string{"HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/bin", "TMPDIR=/tmp", "TZ=UTC", "USER=agent"}},
		{name: "a name and a prefix", extra: []string{"GITHUB_TOKEN", " AWS_* "},
			want: []string{"AWS_REGION=eu-west-1", "AWS_SECRET_ACCESS_KEY=s3cr3t", "GITHUB_TOKEN=ghp_x", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/bin", "TMPDIR=/tmp", "TZ=UTC", "USER=agent"}},
		{name: "everything but the reserved", extra: []string{"*"},
			want: []string{"AWS_REGION=eu-west-1", "AWS_SECRET_ACCESS_KEY=s3cr3t", "GITHUB_TOKEN=ghp_x", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/bin", "TMPDIR=/tmp", "TZ=UTC", "USER=agent"}},
		{name: "a broad prefix passes no reserved name", extra: []string{"N*", "F*"}, want: []string{"HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "PATH=/bin", "TMPDIR=/tmp", "TZ=UTC", "USER=agent"}},
		{name: "a reserved name is refused", extra: []string{"NATS_URL", "FLEET_*", "AWS_REGION"},
			wantErr: "shell: step environment: NATS_URL: the agent's NATS_* variables hold its NATS credentials and settings and are never passed to steps (set the unsafe override to pass them anyway); " +
				"FLEET_*: the agent's FLEET_* variables hold its NATS credentials and settings and are never passed to steps (set the unsafe override to pass them anyway)"},
		{name: "unless deliberately", extra: []string{"NATS_URL"}, passReserved: true,
			want: []string{"HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "NATS_URL=nats://u:hunter2@nats:4222", "PATH=/bin", "TMPDIR=/tmp", "TZ=UTC", "USER=agent"}},
		{name: "not names", extra: []string{"A-B", "*X", "", "1A"}, wantErr: `"A-B" is not a variable name or a prefix ending in *; "*X" is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := NewEnvFilter(tt.extra, tt.passReserved)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrStepEnv)
				require.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, f.Filter(environ))
		})
	}
}
