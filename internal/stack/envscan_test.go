package stack

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// parseDir parses the non-test Go files of dir.
func parseDir(dir string) (*token.FileSet, []*ast.File, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			return nil, nil, err
		}
		files = append(files, f)
	}
	return fset, files, nil
}

// envNamesRead returns the environment variable names the Go files of dir read, with
// where: string literals (or constants of the package) passed to os.Getenv, os.LookupEnv
// or to a function value named getenv (internal/config's LoadFrom takes one), and calls
// of os.Environ (reported under the name "os.Environ()").
func envNamesRead(dir string) (map[string]string, error) {
	fset, files, err := parseDir(dir)
	if err != nil {
		return nil, err
	}
	consts := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[name.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			return true
		})
	}
	out := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var fn string
			switch c := call.Fun.(type) {
			case *ast.SelectorExpr:
				if x, ok := c.X.(*ast.Ident); ok {
					fn = x.Name + "." + c.Sel.Name
				}
			case *ast.Ident:
				fn = c.Name
			}
			where := fset.Position(call.Pos()).String()
			switch fn {
			case "os.Environ":
				out["os.Environ()"] = where
			case "os.Getenv", "os.LookupEnv", "getenv", "syscall.Getenv":
				if len(call.Args) == 0 {
					return true
				}
				switch a := call.Args[0].(type) {
				case *ast.BasicLit:
					if s, err := strconv.Unquote(a.Value); err == nil {
						out[s] = where
					}
				case *ast.Ident:
					if s, ok := consts[a.Name]; ok {
						out[s] = where
					} else if fn != "getenv" {
						out[fmt.Sprintf("<non-constant %s>", a.Name)] = where
					}
					// getenv(v) with a variable: a loop over a list or a helper's
					// parameter; the names come from the literals handed to it (below).
				default:
					out["<non-constant argument>"] = where
				}
			default:
				// A helper handed the getenv function, e.g. positive(getenv, "REPLAY_LIMIT", …).
				passesGetenv := false
				for _, a := range call.Args {
					if id, ok := a.(*ast.Ident); ok && id.Name == "getenv" {
						passesGetenv = true
					}
				}
				if !passesGetenv {
					return true
				}
				for _, a := range call.Args {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						if s, err := strconv.Unquote(lit.Value); err == nil && envName.MatchString(s) {
							out[s] = where
						}
					}
				}
			}
			return true
		})
	}
	return out, nil
}

var envName = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)

// configLoads returns the string arguments of the config.Load (or service.Boot, which
// calls it) calls in dir.
func configLoads(dir string) ([]string, error) {
	_, files, err := parseDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok || !(x.Name == "config" && sel.Sel.Name == "Load" || x.Name == "service" && sel.Sel.Name == "Boot") {
				return true
			}
			if len(call.Args) == 1 {
				if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					s, _ := strconv.Unquote(lit.Value)
					out = append(out, s)
					return true
				}
			}
			out = append(out, "<non-constant>")
			return true
		})
	}
	return out, nil
}
