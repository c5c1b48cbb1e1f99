package runfile

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

var updateDoc = flag.Bool("update", false, "rewrite docs/runfile.md from the run file's types")

// docFile is the generated reference of run.json, relative to this package.
const docFile = "../../docs/runfile.md"

// TestRunfileDoc renders docs/runfile.md from the run file's types — their
// doc comments and json tags, read with go/ast from this package and
// bench/load — and fails when the committed file differs. `go test
// ./bench/runfile -run TestRunfileDoc -update` rewrites it.
func TestRunfileDoc(t *testing.T) {
	got, err := renderRunfileDoc()
	if err != nil {
		t.Fatal(err)
	}
	if *updateDoc {
		if err := os.WriteFile(docFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatalf("%v (run go test ./bench/runfile -run TestRunfileDoc -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is out of date with the run file's types: run go test ./bench/runfile -run TestRunfileDoc -update", docFile)
	}
}

// docType is one named type of the schema.
type docType struct {
	pkg  string // "" for runfile, "load"
	name string
	doc  string
	spec *ast.TypeSpec
	fset *token.FileSet
}

// parseTypes reads the named types of the non-test files in dir.
func parseTypes(dir, pkg string, into map[string]*docType) error {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return err
	}
	sort.Strings(files)
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parse %s: %w", name, err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				into[qualify(pkg, ts.Name.Name)] = &docType{pkg: pkg, name: ts.Name.Name, doc: oneLine(doc), spec: ts, fset: fset}
			}
		}
	}
	return nil
}

func qualify(pkg, name string) string {
	if pkg == "" {
		return name
	}
	return pkg + "." + name
}

// oneLine is a comment's text as one markdown line.
func oneLine(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}
	s := strings.Join(strings.Fields(cg.Text()), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// renderRunfileDoc walks the schema from RunFile, one section per struct
// type in the order they are first reached.
func renderRunfileDoc() ([]byte, error) {
	types := map[string]*docType{}
	if err := parseTypes(".", "", types); err != nil {
		return nil, err
	}
	if err := parseTypes("../load", "load", types); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`# The run file (run.json)

<!-- Generated from the types of bench/runfile and bench/load by TestRunfileDoc; do not edit.
     go test ./bench/runfile -run TestRunfileDoc -update rewrites it. -->

` + "`run.json.gz`" + ` in a results directory is gzip'd JSON of the type RunFile below
(` + "`zcat run.json.gz | jq`" + `). Each section is one object type: its fields by JSON name, the
value's type, and the field's doc comment. *omitempty*: absent when zero. Durations are in
nanoseconds (` + "`…Ns`" + `), sizes in bytes. Histograms are HdrHistogram V2, compressed and
base64. ` + "`mqbench report`" + ` recomputes the derived fields (tails, generatorBound, ratios, aa,
recommendations) from the rest.

`)
	fmt.Fprintf(&b, "Schema version: %d.\n", SchemaVersion)
	queue, seen := []string{"RunFile"}, map[string]bool{"RunFile": true}
	for len(queue) > 0 {
		key := queue[0]
		queue = queue[1:]
		dt := types[key]
		st, ok := dt.spec.Type.(*ast.StructType)
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n", key)
		if dt.doc != "" {
			b.WriteString(dt.doc + "\n\n")
		}
		if !hasJSONFields(st) {
			b.WriteString("(Encoded by its own MarshalJSON; see the text above.)\n")
			continue
		}
		b.WriteString("| field | type | meaning |\n|---|---|---|\n")
		// A comment above a field also speaks for the fields on the lines
		// right after it that have none of their own and that it names.
		groupDoc, groupKey, prevEnd := "", "", -1
		for _, f := range st.Fields.List {
			line := dt.fset.Position(f.Pos()).Line
			switch {
			case f.Doc != nil && len(f.Names) > 0:
				groupDoc = f.Doc.Text()
				groupKey, _, _ = jsonName(f, f.Names[0].Name)
			case line != prevEnd+1:
				groupDoc = ""
			}
			prevEnd = dt.fset.Position(f.End()).Line
			refs := typeRefs(f.Type, dt.pkg)
			for _, r := range refs {
				if t, ok := types[r]; ok && !seen[r] {
					if _, isStruct := t.spec.Type.(*ast.StructType); isStruct {
						seen[r] = true
						queue = append(queue, r)
					}
				}
			}
			doc := oneLine(f.Doc)
			if c := oneLine(f.Comment); c != "" {
				doc = strings.TrimSpace(doc + " " + c)
			}
			if doc == "" && len(f.Names) > 0 && groupDoc != "" && strings.Contains(groupDoc, f.Names[0].Name) {
				doc = "See `" + groupKey + "` above."
			}
			if len(f.Names) == 0 { // embedded: JSON inlines its fields
				fmt.Fprintf(&b, "| *(inline)* | %s | the fields of %s, at this level. %s |\n", typeName(f.Type, dt.pkg, types), typeName(f.Type, dt.pkg, types), doc)
				continue
			}
			for _, n := range f.Names {
				if !n.IsExported() {
					continue
				}
				name, omit, skip := jsonName(f, n.Name)
				if skip {
					continue
				}
				cell := "`" + name + "`"
				if omit {
					cell += " *(omitempty)*"
				}
				fmt.Fprintf(&b, "| %s | %s | %s |\n", cell, typeName(f.Type, dt.pkg, types), doc)
			}
		}
	}
	return b.Bytes(), nil
}

func hasJSONFields(st *ast.StructType) bool {
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			return true
		}
		for _, n := range f.Names {
			if n.IsExported() {
				return true
			}
		}
	}
	return false
}

// jsonName is a field's JSON key, whether it is omitempty, and whether
// it is left out (json:"-").
func jsonName(f *ast.Field, goName string) (string, bool, bool) {
	if f.Tag == nil {
		return goName, false, false
	}
	tag := reflect.StructTag(strings.Trim(f.Tag.Value, "`")).Get("json")
	if tag == "-" {
		return "", false, true
	}
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" {
		name = goName
	}
	return name, strings.Contains(opts, "omitempty"), false
}

// typeRefs are the schema types an expression names, qualified.
func typeRefs(e ast.Expr, pkg string) []string {
	switch t := e.(type) {
	case *ast.Ident:
		return []string{qualify(pkg, t.Name)}
	case *ast.SelectorExpr:
		if x, ok := t.X.(*ast.Ident); ok {
			return []string{x.Name + "." + t.Sel.Name}
		}
	case *ast.StarExpr:
		return typeRefs(t.X, pkg)
	case *ast.ArrayType:
		return typeRefs(t.Elt, pkg)
	case *ast.MapType:
		return append(typeRefs(t.Key, pkg), typeRefs(t.Value, pkg)...)
	}
	return nil
}

// typeName renders a field's type in JSON terms: a schema type links to
// its section, a named scalar says its underlying kind.
func typeName(e ast.Expr, pkg string, types map[string]*docType) string {
	switch t := e.(type) {
	case *ast.Ident, *ast.SelectorExpr:
		key := typeRefs(t, pkg)[0]
		dt, ok := types[key]
		if !ok {
			return jsonKind(strings.TrimPrefix(key, pkg+"."))
		}
		if _, isStruct := dt.spec.Type.(*ast.StructType); isStruct {
			return fmt.Sprintf("[%s](#%s)", key, strings.ToLower(strings.ReplaceAll(key, ".", "")))
		}
		return typeName(dt.spec.Type, dt.pkg, types) + " (" + key + ")"
	case *ast.StarExpr:
		return typeName(t.X, pkg, types)
	case *ast.ArrayType:
		return "array of " + typeName(t.Elt, pkg, types)
	case *ast.MapType:
		return "object: " + typeName(t.Key, pkg, types) + " → " + typeName(t.Value, pkg, types)
	}
	return fmt.Sprintf("%T", e)
}

func jsonKind(goType string) string {
	switch goType {
	case "string", "bool":
		return goType
	case "int", "int64", "uint64", "uint32", "int32", "float64":
		return "number"
	case "time.Time":
		return "string (RFC 3339 time)"
	case "time.Duration":
		return "number (ns)"
	}
	return goType
}
