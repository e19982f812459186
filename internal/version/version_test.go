package version

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGet(t *testing.T) {
	built := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/jetfleet/jetfleet", Version: "v0.4.0"},
		Settings:  []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}},
	}
	tests := []struct {
		name            string
		version, commit string
		bi              *debug.BuildInfo
		want            Info
		wantString      string
		wantSemver      string
	}{
		{
			name: "stamped by the linker wins over the build info", version: "v0.5.0", commit: "fedcba9876543210", bi: built,
			want:       Info{Version: "v0.5.0", Commit: "fedcba9876543210", Go: "go1.26.8"},
			wantString: "v0.5.0 (commit fedcba987654, go1.26.8)", wantSemver: "0.5.0",
		},
		{
			name: "go install: the module version and the vcs stamp", bi: built,
			want:       Info{Version: "v0.4.0", Commit: "0123456789abcdef", Modified: true, Go: "go1.26.8"},
			wantString: "v0.4.0 (commit 0123456789ab+modified, go1.26.8)", wantSemver: "0.4.0",
		},
		{
			name: "a checkout's go build is devel", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}},
			want:       Info{Version: Dev, Go: "go1.26.8"},
			wantString: "devel (commit unknown, go1.26.8)", wantSemver: "0.0.0-devel",
		},
		{
			name: "a pseudo-version is semver already", bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.1-0.20261128120000-0123456789ab"}},
			want:       Info{Version: "v0.4.1-0.20261128120000-0123456789ab", Go: "go1.26.8"},
			wantString: "v0.4.1-0.20261128120000-0123456789ab (commit unknown, go1.26.8)", wantSemver: "0.4.1-0.20261128120000-0123456789ab",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := get(tt.version, tt.commit, tt.bi)
			require.Equal(t, tt.want, got)
			require.Equal(t, tt.wantString, got.String())
			require.Equal(t, tt.wantSemver, got.Semver())
		})
	}
}

func TestGetWithoutBuildInfo(t *testing.T) {
	got := get("", "", nil)
	require.Equal(t, Dev, got.Version)
	require.NotEmpty(t, got.Go)
}
