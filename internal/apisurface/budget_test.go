package apisurface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Bounds of the public surface (issue #37): a pkg/ package is a face, its
// machinery lives under internal/.
const (
	maxPublicFuncs = 250  // exported functions and methods in all of pkg/
	maxPublicLines = 4000 // non-test lines of one pkg/ package
)

// TestPublicSurfaceBounds counts, from the source, the exported functions
// and the exported methods of exported types of every pkg/ package, and
// each package's non-test lines.
func TestPublicSurfaceBounds(t *testing.T) {
	total := 0
	for _, name := range publicPackages(t) {
		dir := filepath.Join(root, "pkg", name)
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, 0)
		require.NoError(t, err)
		funcs, lines := 0, 0
		for _, p := range pkgs {
			for path, f := range p.Files {
				data, err := os.ReadFile(path)
				require.NoError(t, err)
				lines += strings.Count(string(data), "\n")
				for _, d := range f.Decls {
					fd, ok := d.(*ast.FuncDecl)
					if !ok || !fd.Name.IsExported() {
						continue
					}
					if fd.Recv != nil && !exportedReceiver(fd.Recv.List[0].Type) {
						continue
					}
					funcs++
				}
			}
		}
		require.LessOrEqual(t, lines, maxPublicLines, "pkg/%s has %d non-test lines: move machinery under internal/", name, lines)
		total += funcs
	}
	require.LessOrEqual(t, total, maxPublicFuncs, "pkg/ exports %d functions and methods", total)
}

func exportedReceiver(e ast.Expr) bool {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return true
		}
	}
}
