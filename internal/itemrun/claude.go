package itemrun

import (
	"os/exec"
	"strings"

	"github.com/jetfleet/jetfleet/internal/shell"
	"github.com/jetfleet/jetfleet/internal/wire"
)

// A claude step (Prodigy's claude:) runs Claude Code's CLI headless in the
// item's directory: Config.ClaudeCommand, then Config.ClaudeArgs, then the
// step's text with its ${...} references filled in as plain text (the
// prompt is one argument: nothing in it reaches a shell). It runs as a
// shell step does, through the same runner: timeout, kill grace,
// heartbeat, output kept, retries and everything after.

// claudeEnvCommand and claudeEnvPrompt carry the CLI's path and the
// prompt to the step's script (JETFLEET_* variables no job may set).
const (
	claudeEnvCommand = "JETFLEET_CLAUDE_COMMAND"
	claudeEnvPrompt  = "JETFLEET_CLAUDE_PROMPT"
)

// claudeScript returns the path of the CLI at command (looked up on the
// agent's PATH) and the script that runs it with args and the prompt, or
// "" when there is no such command.
func claudeScript(command string, args []string) (path, script string) {
	path, err := exec.LookPath(command)
	if err != nil {
		return "", ""
	}
	var b strings.Builder
	b.WriteString(`exec "$` + claudeEnvCommand + `"`)
	for _, a := range args {
		b.WriteString(" " + shell.Quote(a))
	}
	b.WriteString(` "$` + claudeEnvPrompt + `"`)
	return path, b.String()
}

// claudePrompt is a claude step's prompt for an item.
func claudePrompt(t *wire.Template, v shell.Vars) (string, error) {
	return v.Text(*t)
}
