//go:build !linux

package itemrun

import "errors"

// renameNoReplaceWorks: elsewhere a rename may replace an empty directory
// of the same name, so no spares are made (itemdir.go).
const renameNoReplaceWorks = false

func renameNoReplace(string, string) error { return errors.ErrUnsupported }

type dirOwner struct{}

func ownerOf(string) (dirOwner, bool) { return dirOwner{}, false }

func emptyLike(string, dirOwner) bool { return false }
