package envflag_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// flagFuncs are the flag.FlagSet methods that define a flag: name, then
// default, then usage.
var flagFuncs = map[string]bool{
	"String": true, "StringVar": true, "Bool": true, "BoolVar": true, "Int": true, "IntVar": true,
	"Int64": true, "Int64Var": true, "Duration": true, "DurationVar": true, "TextVar": true, "Float64Var": true,
}

// TestEveryDaemonFlagHasItsEnvTwin: a daemon in a container is configured
// by its environment, so each flag of cmd/coordinator and cmd/agent names
// the variable that sets it ("(env FLEET_X)" in its usage) and reads it.
func TestEveryDaemonFlagHasItsEnvTwin(t *testing.T) {
	for _, dir := range []string{"coordinator", "agent"} {
		files, err := filepath.Glob(filepath.Join("..", "..", "cmd", dir, "*.go"))
		require.NoError(t, err)
		checked := 0
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			require.NoError(t, err)
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || !flagFuncs[sel.Sel.Name] || len(call.Args) < 3 {
					return true
				}
				if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "fs" {
					return true
				}
				nameArg := call.Args[len(call.Args)-3]
				lit, ok := nameArg.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				name, _ := strconv.Unquote(lit.Value)
				if name == "version" {
					return true // prints and exits: nothing to configure
				}
				usage := call.Args[len(call.Args)-1]
				text := ""
				if u, ok := usage.(*ast.BasicLit); ok {
					text, _ = strconv.Unquote(u.Value)
				}
				checked++
				if !strings.Contains(text, "env ") {
					t.Errorf("%s: --%s has no environment variable: read one (envflag) and name it in the usage, \"(env FLEET_...)\"", fset.Position(call.Pos()), name)
				}
				return true
			})
		}
		require.NotZero(t, checked, "no flags found in cmd/%s", dir)
	}
}
