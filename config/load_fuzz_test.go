package config_test

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/edgegate/gateway/config"
)

// fuzzFilename is what the fuzzed source is read from. It stands in the
// package folder, so file() and api_keys_file resolve against it.
const fuzzFilename = "fuzz.hcl"

// FuzzLoad checks that whatever the file says, Parse answers with either a
// File or error diagnostics that each point into the source, so that
// `gateway validate` can always show the offending line.
func FuzzLoad(f *testing.F) {
	seeds := []string{"../gateway.hcl", "../testdata/valid/full.hcl"}
	invalid, err := filepath.Glob("../testdata/invalid/*.hcl")
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range append(seeds, invalid...) {
		src, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	// Expressions the fixtures do not use: a list that is not a literal,
	// templates, conditionals, and the two functions.
	for _, src := range []string{
		`subject { trusted_proxies = [for p in ["10.0.0.0/8"] : p] }`,
		`route "r" {
  path     = "/${"a"}"
  upstream = true ? "http://127.0.0.1:9000" : "x"
  methods  = [for m in ["get"] : upper(m)]
}`,
		`pseudonym {
  version = 1
  key "1" { secret = file("../testdata/secrets/fake-hmac-v1.txt") }
}`,
		`limiter {
  backend = "redis"
  redis {
    addrs    = ["127.0.0.1:6379"]
    password = env("NOPE", "x")
  }
}`,
		`tls {
  acme {
    domains    = ["a.example"]
    challenges = ["http-01"]
  }
}`,
	} {
		f.Add([]byte(src))
	}
	noEnv := func(string) (string, bool) { return "", false }
	f.Fuzz(func(t *testing.T, src []byte) {
		if costlyToEvaluate(src) {
			return
		}
		file, diags := config.Parse(fuzzFilename, src, noEnv)
		if !diags.HasErrors() {
			if file == nil {
				t.Fatalf("no errors and no file; diagnostics: %v", diags)
			}
			return
		}
		for _, d := range diags {
			if d.Severity != hcl.DiagError {
				continue
			}
			r := d.Subject
			switch {
			case r == nil:
				t.Fatalf("error %q has no source range", d.Summary)
			case r.Filename != fuzzFilename:
				t.Fatalf("error %q points into %q, not %q", d.Summary, r.Filename, fuzzFilename)
			case r.Start.Byte < 0 || r.Start.Byte > r.End.Byte || r.End.Byte > len(src):
				t.Fatalf("error %q has range %d-%d in a source of %d bytes", d.Summary, r.Start.Byte, r.End.Byte, len(src))
			}
		}
		// What `gateway validate` prints from them must not fail either.
		config.WriteDiagnostics(io.Discard, map[string][]byte{fuzzFilename: src}, diags)
	})
}

var (
	// largeExponent is a decimal exponent of 1,000 or more.
	largeExponent = regexp.MustCompile(`[eE][+-]?0*[1-9][0-9]{3,}`)
	forKeyword    = regexp.MustCompile(`\bfor\b`)
)

// costlyToEvaluate reports whether src could make HCL itself, rather than
// the checker, spend seconds or gigabytes: a number such as 1e99999999 that
// a string attribute turns into its hundred million digits, a chain of
// products that builds one, or nested for expressions that double a string
// at each level. Configuration files are written by the operator, so these
// are no bug of the gateway, and a target that tried them would only report
// HCL's limits. Most inputs are cleared by their bytes alone; the rest are
// parsed, since "for" and "/" are common in comments and paths.
func costlyToEvaluate(src []byte) bool {
	if len(src) > 16<<10 || largeExponent.Match(src) {
		return true
	}
	const maxProducts = 64
	if len(forKeyword.FindAllIndex(src, 2)) < 2 && bytes.Count(src, []byte("*"))+bytes.Count(src, []byte("/")) <= maxProducts {
		return false
	}
	parsed, diags := hclsyntax.ParseConfig(src, fuzzFilename, hcl.InitialPos)
	if diags.HasErrors() {
		return false // Parse stops at syntax errors, before evaluating
	}
	var loops, products int
	hclsyntax.VisitAll(parsed.Body.(*hclsyntax.Body), func(n hclsyntax.Node) hcl.Diagnostics {
		switch n := n.(type) {
		case *hclsyntax.ForExpr:
			loops++
		case *hclsyntax.BinaryOpExpr:
			if n.Op == hclsyntax.OpMultiply || n.Op == hclsyntax.OpDivide {
				products++
			}
		}
		return nil
	})
	return loops > 1 || products > maxProducts
}
