package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/invalid")

// TestValidateGolden runs `gateway validate` on every file of testdata/invalid
// and compares what it prints with the .golden file beside it. Each fixture's
// name says what is wrong with it.
func TestValidateGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, path := range files {
		name := strings.TrimSuffix(filepath.Base(path), ".hcl")
		t.Run(strings.ReplaceAll(name, "_", " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run([]string{"validate", "-config", path}, nil, &stdout, &stderr, nil)
			if code != 1 {
				t.Fatalf("exit code %d, want 1; stderr:\n%s", code, stderr.String())
			}
			got := stderr.Bytes()
			golden := strings.TrimSuffix(path, ".hcl") + ".golden"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestValidateGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("validate printed:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

func TestValidateAcceptsTheExamples(t *testing.T) {
	files, _ := filepath.Glob("testdata/valid/*.hcl")
	for _, path := range append(files, "gateway.hcl") {
		t.Run(path, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run([]string{"validate", "-config", path}, nil, &stdout, &stderr, nil); code != 0 {
				t.Fatalf("exit code %d:\n%s", code, stderr.String())
			}
			if !strings.Contains(stdout.String(), ": ok: ") {
				t.Fatalf("stdout %q", stdout.String())
			}
		})
	}
}

func TestHashKey(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"hash-key"}, strings.NewReader("known-key-one\n"), &stdout, &stderr, nil); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	keys, _ := os.ReadFile("testdata/api-keys.txt")
	if h := strings.TrimSpace(stdout.String()); len(h) != 64 || !strings.Contains(string(keys), h) {
		t.Fatalf("hash %q is not in testdata/api-keys.txt", h)
	}
}
