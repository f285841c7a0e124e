package limiter

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// layer is where a file of the package stands: the types and rules every
// backend shares at the bottom (0), the memory and the Redis backend
// above them (1, side by side, neither reaching into the other), and what
// puts backends together on top (2).
func layer(file string) (int, string) {
	switch {
	case strings.HasPrefix(file, "memory"):
		return 1, "memory"
	case strings.HasPrefix(file, "redis"), file == "batch.go", file == "breaker.go",
		file == "budget_lease.go", file == "denials.go", file == "restarts.go":
		return 1, "redis"
	case file == "fallback.go", file == "observed.go", file == "open.go":
		return 2, ""
	}
	return 0, ""
}

// The package's files import one another one way, as packages do: a file
// names nothing declared in a file of a layer above its own, and the two
// backends name nothing of each other's.
func TestFilesOfThePackageLayerOneWay(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*ast.File{}
	// A package-level name resolves across files through the package
	// scope; methods are named through their receivers' types.
	scope := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					scope[d.Name.Name] = name
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						scope[s.Name.Name] = name
					case *ast.ValueSpec:
						for _, n := range s.Names {
							scope[n.Name] = name
						}
					}
				}
			}
		}
	}
	for name, f := range files {
		from, fromSide := layer(name)
		seen := map[string]bool{}
		var visit func(n ast.Node) bool
		visit = func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				// A field or method is found through its value's type,
				// and an imported package's names are not this one's.
				ast.Inspect(n.X, visit)
				return false
			case *ast.Ident:
				target, ok := scope[n.Name]
				if !ok || n.Name == "_" || target == name || seen[n.Name] {
					return true
				}
				if to, toSide := layer(target); to > from || to == 1 && from == 1 && toSide != fromSide {
					seen[n.Name] = true
					t.Errorf("%s names %s, declared in %s: a layer it must not reach", name, n.Name, target)
				}
			}
			return true
		}
		ast.Inspect(f, visit)
	}
}
