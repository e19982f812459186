package apisurface

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

const (
	designDoc     = "docs/design.md"
	surfaceHeader = "## Public API"
	module        = "github.com/jetfleet/jetfleet"
)

// publicPackages lists the directories of pkg/ that hold Go code.
func publicPackages(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "pkg"))
	require.NoError(t, err)
	var pkgs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		gos, _ := filepath.Glob(filepath.Join(root, "pkg", e.Name(), "*.go"))
		if len(gos) > 0 {
			pkgs = append(pkgs, e.Name())
		}
	}
	require.NotEmpty(t, pkgs)
	return pkgs
}

// exported returns the exported package-level identifiers of pkg/<name>
// as go doc lists them (constants, variables, functions, types, and the
// constructors and constants grouped under a type), read from the
// source, not from a build; and the exported methods as Type.Method.
func exported(t *testing.T, name string) (idents, methods []string) {
	t.Helper()
	fset := token.NewFileSet()
	dir := filepath.Join(root, "pkg", name)
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	require.NoError(t, err)
	require.Len(t, pkgs, 1, "one package in %s", dir)
	var files []*ast.File
	for _, p := range pkgs {
		for _, f := range p.Files {
			files = append(files, f)
		}
	}
	d, err := doc.NewFromFiles(fset, files, module+"/pkg/"+name)
	require.NoError(t, err)
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			idents = append(idents, v.Names...)
		}
	}
	funcs := func(fs []*doc.Func) {
		for _, f := range fs {
			idents = append(idents, f.Name)
		}
	}
	values(d.Consts)
	values(d.Vars)
	funcs(d.Funcs)
	for _, ty := range d.Types {
		idents = append(idents, ty.Name)
		values(ty.Consts)
		values(ty.Vars)
		funcs(ty.Funcs)
		for _, m := range ty.Methods {
			methods = append(methods, ty.Name+"."+m.Name)
		}
	}
	slices.Sort(idents)
	return slices.Compact(idents), methods
}

// leading matches the identifier a backticked span of the section names:
// `Name`, `Name(...)`, `Name[T]`, `Type.Method`, `agent.Name`. A method
// may be named in a line's prose (`WithDefaults`); methods are not
// required.
var leading = regexp.MustCompile("`(?:[a-z][a-z0-9]*\\.)?([A-Z][A-Za-z0-9_]*)")

// documented reads docs/design.md's public-API section: for each
// "### pkg/<name>" heading, the identifiers its lines name in backticks.
func documented(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, designDoc))
	require.NoError(t, err)
	text := string(data)
	start := strings.Index(text, "\n"+surfaceHeader+"\n")
	require.GreaterOrEqual(t, start, 0, "%s has no %q section: add one, with a \"### pkg/<name>\" heading per public package and one line per exported identifier (or group of them)", designDoc, surfaceHeader)
	section := text[start+1+len(surfaceHeader):]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	names := map[string][]string{}
	pkg := ""
	for _, line := range strings.Split(section, "\n") {
		if h, ok := strings.CutPrefix(line, "### pkg/"); ok {
			pkg = strings.TrimSpace(strings.Trim(strings.TrimSpace(h), "`"))
			names[pkg] = nil
			continue
		}
		if pkg == "" {
			continue
		}
		for _, m := range leading.FindAllStringSubmatch(line, -1) {
			names[pkg] = append(names[pkg], m[1])
		}
	}
	return names
}

// TestPublicAPIIsDocumented fails when a pkg/ package exports an
// identifier that docs/design.md's public-API section does not name, or
// when the section names one (or a package) that no longer exists: the
// public surface grows only on purpose.
func TestPublicAPIIsDocumented(t *testing.T) {
	docs := documented(t)
	pkgs := publicPackages(t)
	for _, name := range pkgs {
		t.Run(name, func(t *testing.T) {
			named, ok := docs[name]
			require.True(t, ok, "pkg/%s has no \"### pkg/%s\" heading in %s's %q section: add one listing its exported identifiers, one line each, or move the package under internal/ if users do not import it", name, name, designDoc, surfaceHeader)
			idents, methods := exported(t, name)
			var missing []string
			for _, id := range idents {
				if !slices.Contains(named, id) {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				var b strings.Builder
				for _, id := range missing {
					b.WriteString("\n- `" + id + "`: <what a user does with it>")
				}
				t.Errorf("pkg/%s exports %s, which %s's %q section does not name.\n"+
					"If users need it, add a line under \"### pkg/%s\", for example:%s\n"+
					"If only jetfleet's own code needs it, unexport it or move it under internal/.",
					name, strings.Join(missing, ", "), designDoc, surfaceHeader, name, b.String())
			}
			var gone []string
			for _, id := range named {
				isMethod := slices.ContainsFunc(methods, func(m string) bool { return strings.HasPrefix(m, id+".") || strings.HasSuffix(m, "."+id) })
				if !slices.Contains(idents, id) && !isMethod {
					gone = append(gone, id)
				}
			}
			slices.Sort(gone)
			require.Empty(t, slices.Compact(gone), "%s's \"### pkg/%s\" names identifiers pkg/%s does not export: remove or rename them", designDoc, name, name)
		})
	}
	for name := range docs {
		require.True(t, slices.Contains(pkgs, name), "%s's %q section has a \"### pkg/%s\" heading, but there is no such package: remove it", designDoc, surfaceHeader, name)
	}
}

// TestExamplesImportNoInternalPackage: a pkg/ example is what a user
// copies, and a user cannot import internal/.
func TestExamplesImportNoInternalPackage(t *testing.T) {
	examples, err := filepath.Glob(filepath.Join(root, "pkg", "*", "example*_test.go"))
	require.NoError(t, err)
	require.NotEmpty(t, examples)
	for _, path := range examples {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			require.NoError(t, err)
			rel, _ := filepath.Rel(root, path)
			require.False(t, strings.HasPrefix(p, module+"/internal/"), "%s imports %s: a user cannot; use the public packages (pkg/fleettest runs a fleet)", rel, p)
		}
	}
}
