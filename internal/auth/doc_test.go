package auth_test

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetfleet/jetfleet/internal/auth"
	"github.com/jetfleet/jetfleet/pkg/messages"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated permissions in docs/security.md")

const (
	docBegin = "<!-- BEGIN GENERATED: internal/auth.PermissionsMarkdown; go test ./internal/auth -update-docs -->"
	docEnd   = "<!-- END GENERATED -->"
)

// docs/security.md lists each role's exact permissions as the code
// generates them: a change to RolePermissions that does not update the
// document fails here (go test ./internal/auth -update-docs rewrites it).
func TestSecurityDocListsTheGeneratedPermissions(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "security.md")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	doc := string(data)
	start, end := strings.Index(doc, docBegin), strings.Index(doc, docEnd)
	require.True(t, start >= 0 && end > start, "docs/security.md has no generated permissions section")
	want, err := auth.PermissionsMarkdown(messages.MustNames("fleet"))
	require.NoError(t, err)
	got := strings.TrimSpace(doc[start+len(docBegin) : end])
	if *updateDocs {
		doc = doc[:start+len(docBegin)] + "\n\n" + want + "\n\n" + doc[end:]
		require.NoError(t, os.WriteFile(path, []byte(doc), 0o644))
		return
	}
	require.Equal(t, strings.TrimSpace(want), got, "docs/security.md is out of date: go test ./internal/auth -run TestSecurityDoc -update-docs")
}
