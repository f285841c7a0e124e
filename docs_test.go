package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The documents: the README and everything in docs/ and bench/.
func documents(t *testing.T) []string {
	t.Helper()
	docs := []string{"README.md", "bench/README.md"}
	more, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append(docs, more...)
}

var (
	metricDefinition = regexp.MustCompile(`(?:Name:\s*|NewDesc\()"(gateway_[a-z0-9_]+)"`)
	metricMention    = regexp.MustCompile(`\bgateway_[a-z0-9_]+`)
)

// TestOperationsDocNamesEveryMetric: every metric the gateway defines has
// its row in docs/operations.md, and every gateway_ name a document
// mentions is one the gateway defines, so neither a new series nor a
// renamed one goes unseen by operators.
func TestOperationsDocNamesEveryMetric(t *testing.T) {
	defined := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == "bench" || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricDefinition.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) == 0 {
		t.Fatal("found no metric definitions; the pattern no longer matches how metrics are named")
	}
	ops, err := os.ReadFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for name := range defined {
		if !strings.Contains(string(ops), "| `"+name+"` |") {
			t.Errorf("docs/operations.md has no row for metric %s", name)
		}
	}
	for _, doc := range documents(t) {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range metricMention.FindAllString(string(src), -1) {
			if !defined[name] {
				t.Errorf("%s names %s, a metric the gateway does not define", doc, name)
			}
		}
	}
}

var (
	markdownLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingLine  = regexp.MustCompile(`(?m)^#{1,6} (.*)$`)
)

// TestDocumentLinksResolve: every relative link in the documents names a
// file that exists and, with a #fragment, a heading in it.
func TestDocumentLinksResolve(t *testing.T) {
	for _, doc := range documents(t) {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(withoutCode(string(src)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
			}
			linked, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
				continue
			}
			if fragment != "" && !slices.Contains(anchors(string(linked)), fragment) {
				t.Errorf("%s links to %s: %s has no heading with that anchor (it has %q)", doc, target, path, anchors(string(linked)))
			}
		}
	}
}

// anchors are the fragments a Markdown renderer gives src's headings:
// lower case, punctuation dropped, spaces as hyphens.
func anchors(src string) []string {
	var out []string
	for _, m := range headingLine.FindAllStringSubmatch(withoutCode(src), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}

// withoutCode is src without its fenced code blocks.
func withoutCode(src string) string {
	var b strings.Builder
	in := false
	for line := range strings.Lines(src) {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line)
		}
	}
	return b.String()
}

var outsideCitation = regexp.MustCompile(`\bSPEC\b|\b[Ii]ssues? #?[0-9]+`)

// TestNothingCitesADocumentOutsideTheRepository: comments and documents
// say the thing itself, or point into docs/, rather than at a
// specification or an issue a reader of the repository cannot open.
func TestNothingCitesADocumentOutsideTheRepository(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".hcl", ".lua":
		default:
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for n, line := range strings.Split(string(src), "\n") {
			if m := outsideCitation.FindString(line); m != "" && !strings.Contains(line, "outsideCitation") {
				t.Errorf("%s:%d cites %q, outside the repository: say the thing itself, or point at docs/", path, n+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// hclExample is a fenced block of HCL in a document: its info string
// (after the backticks) and its text.
var hclExample = regexp.MustCompile("(?ms)^```(hcl[^\n]*)\n(.*?)^```")

// TestTheDocumentsExamplesValidate: every ```hcl block of a document is a
// whole configuration file that `gateway validate` accepts, in a folder
// that holds it and a copy of testdata/api-keys.txt as api-keys.txt (the
// name the examples use). A block that cannot stand alone (a block to put
// inside another, or one naming files on the reader's machine) says so:
// ```hcl fragment.
func TestTheDocumentsExamplesValidate(t *testing.T) {
	keys, err := os.ReadFile("testdata/api-keys.txt")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, doc := range documents(t) {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range hclExample.FindAllSubmatchIndex(src, -1) {
			info, example := strings.Fields(string(src[m[2]:m[3]])), src[m[4]:m[5]]
			if info[0] != "hcl" || slices.Contains(info, "fragment") {
				continue
			}
			checked++
			line := 1 + strings.Count(string(src[:m[0]]), "\n")
			t.Run(fmt.Sprintf("%s:%d", doc, line), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "gateway.hcl")
				if err := os.WriteFile(filepath.Join(dir, "api-keys.txt"), keys, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, example, 0o600); err != nil {
					t.Fatal(err)
				}
				var stdout, stderr bytes.Buffer
				if code := run([]string{"validate", "-config", path}, nil, &stdout, &stderr, nil); code != 0 {
					t.Fatalf("%s:%d: the example does not validate (a part of a file is marked ```hcl fragment):\n%s", doc, line, stderr.String())
				}
			})
		}
	}
	if checked == 0 {
		t.Fatal("no HCL example found in the documents")
	}
}
