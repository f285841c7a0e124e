package main

import (
	"bytes"
	"strings"
	"testing"
)

// Every way of asking for help lists every command on standard output and
// exits 0; a command's -h lists its flags too.
func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"run", "-h"}, {"validate", "-h"}, {"hash-key", "-h"}, {"version", "-h"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, strings.NewReader(""), &stdout, &stderr, nil)
		if code != 0 {
			t.Errorf("%v: exit %d, stderr %s", args, code, stderr.String())
		}
		for _, name := range []string{"run", "validate", "hash-key", "version", "help"} {
			if !strings.Contains(stdout.String(), "gateway "+name) {
				t.Errorf("%v does not list %s:\n%s", args, name, stdout.String())
			}
		}
		if args[0] == "run" || args[0] == "validate" {
			if !strings.Contains(stdout.String(), "-config file") {
				t.Errorf("%v does not list -config:\n%s", args, stdout.String())
			}
		}
	}
}

// A mistake is told on standard error with the commands, and exits 2.
func TestAMistakenCommandLineListsTheCommands(t *testing.T) {
	for _, args := range [][]string{{"serve"}, {"run", "-nope"}, {"validate", "extra"}, {"version", "extra"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, strings.NewReader(""), &stdout, &stderr, nil); code != 2 {
			t.Errorf("%v: exit %d", args, code)
		}
		if !strings.Contains(stderr.String(), "gateway hash-key") {
			t.Errorf("%v: stderr does not list the commands:\n%s", args, stderr.String())
		}
	}
}
