package auth

import (
	"fmt"
	"strings"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// docPool stands for an agent's pool in PermissionsMarkdown.
const docPool = "POOL"

// PermissionsMarkdown renders every role's exact permissions under names,
// an agent's for the pool written <pool>, as docs/security.md shows them
// (a test keeps the two equal, so the document cannot drift from the
// code).
func PermissionsMarkdown(names messages.Names) (string, error) {
	var b strings.Builder
	for _, role := range Roles() {
		p, err := RolePermissions(role, names, docPool)
		if err != nil {
			return "", err
		}
		user := ""
		switch role {
		case RoleAgent:
			user = " (user <code>agent-&lt;pool&gt;</code>, one per pool)"
		case RoleCoordinator:
			user = " (its grants on <code>&lt;pool&gt;</code> are repeated for each pool)"
		}
		fmt.Fprintf(&b, "<details><summary><b>%s</b>%s: %d publish and %d subscribe subjects</summary>\n\nPublish (and so request):\n\n```\n",
			role, user, len(p.Publish.Allow), len(p.Subscribe.Allow))
		for _, s := range p.Publish.Allow {
			fmt.Fprintln(&b, docSubject(s))
		}
		b.WriteString("```\n\nSubscribe:\n\n```\n")
		for _, s := range p.Subscribe.Allow {
			fmt.Fprintln(&b, docSubject(s))
		}
		b.WriteString("```\n")
		if p.AllowResponses {
			b.WriteString("\nand one reply to each request it receives (`allow_responses`).\n")
		}
		b.WriteString("\n</details>\n\n")
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// docSubject writes the placeholders of a generated subject as the
// document names them.
func docSubject(s string) string {
	return strings.NewReplacer(docPool, "<pool>", UserKey, "<user's public key>").Replace(s)
}
