// Package version says which jetfleet build is running: the release
// version, the commit it was built from and the Go version that built it.
//
// A release build stamps Version (and Commit) with the linker:
//
//	go build -ldflags "-X github.com/jetfleet/jetfleet/internal/version.Version=v0.4.0 \
//	  -X github.com/jetfleet/jetfleet/internal/version.Commit=<sha>" ./cmd/...
//
// scripts/release.sh does so. A binary built by `go install
// github.com/jetfleet/jetfleet/cmd/...@v0.4.0` is not stamped; it takes
// its version from the module's build information (debug.ReadBuildInfo),
// and its commit from the VCS stamp when the build recorded one.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Version and Commit are set at link time (-ldflags -X); empty means
// unstamped, and Get falls back to the build information.
var (
	Version string
	Commit  string
)

// Dev is the version of a build that neither the linker nor the module
// build information names (a `go build` or `go test` in a checkout).
const Dev = "devel"

// Info is what a build knows of itself.
type Info struct {
	// Version is the release ("v0.4.0") or Dev.
	Version string `json:"version"`
	// Commit is the VCS revision, empty when unknown.
	Commit string `json:"commit,omitempty"`
	// Modified is set when the build's work tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// Go is the Go version that built the binary.
	Go string `json:"go"`
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return get(Version, Commit, bi)
}

// get is Get with its inputs given, for tests.
func get(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, Go: runtime.Version()}
	if bi != nil {
		if bi.GoVersion != "" {
			info.Go = bi.GoVersion
		}
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		if info.Commit == "" {
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					info.Commit = s.Value
				case "vcs.modified":
					info.Modified = s.Value == "true"
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = Dev
	}
	return info
}

// String is the one line `--version` prints:
// "v0.4.0 (commit 0123456789ab, go1.26.8)".
func (i Info) String() string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	} else if len(commit) > 12 {
		commit = commit[:12]
	}
	if i.Modified {
		commit += "+modified"
	}
	return fmt.Sprintf("%s (commit %s, %s)", i.Version, commit, i.Go)
}

// Semver is the version in the form NATS micro services require
// (semver without the leading "v"): "0.4.0", or "0.0.0-devel" for an
// unreleased build. A pseudo-version from `go install @commit`
// (v0.4.1-0.20261128120000-0123456789ab) is semver already.
func (i Info) Semver() string {
	if i.Version == Dev {
		return "0.0.0-" + Dev
	}
	return strings.TrimPrefix(i.Version, "v")
}
