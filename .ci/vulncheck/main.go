// Command vulncheck reads `govulncheck -format json` on standard input and
// fails when the code calls a vulnerable function: it prints each such
// finding and exits 1. Vulnerabilities only imported or required, never
// called, are counted and listed, not failed on.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
)

type message struct {
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
		} `json:"trace"`
	} `json:"finding"`
}

func main() {
	dec := json.NewDecoder(os.Stdin)
	called := map[string]string{}
	other := map[string]bool{}
	for {
		var m message
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "vulncheck: reading govulncheck output:", err)
			os.Exit(2)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 {
			continue
		}
		t := f.Trace[0]
		if t.Function != "" {
			called[f.OSV] = fmt.Sprintf("%s: %s@%s, fixed in %s (called: %s.%s)", f.OSV, t.Module, t.Version, f.FixedVersion, t.Package, t.Function)
		} else {
			other[f.OSV] = true
		}
	}
	for id := range called {
		delete(other, id)
	}
	fmt.Printf("govulncheck: %d vulnerabilities called, %d more imported or required but not called\n", len(called), len(other))
	if len(called) == 0 {
		return
	}
	lines := make([]string, 0, len(called))
	for _, l := range called {
		lines = append(lines, l)
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println("  " + l)
	}
	os.Exit(1)
}
