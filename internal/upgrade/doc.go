// Package upgrade holds the test of mixed-version fleets: the previous
// release (the last one with a commit in docs/releases.txt), built from
// the repository's own history, runs jobs beside this tree's code, agents
// of one release with the coordinator of the other, both ways
// (docs/contract.md §8). It has no code of its own.
//
// The previous release's binaries are built once per commit into the
// user cache directory (jetfleet-upgrade/<commit>), when the environment
// sets JETFLEET_UPGRADE_BUILD=1 (.ci/run does, before `go test ./...`);
// with them cached the test takes a few seconds. It skips when they are
// not built and may not be, when the repository's history is not at hand
// (a source archive, a shallow clone without that commit), and under
// -short.
package upgrade
